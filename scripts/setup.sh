#!/usr/bin/env bash
# Installs ringtrain's build and test dependencies from Debian's packages (idempotent: quick when present).
set -euo pipefail

# python3-protobuf: the independent decoder of the TensorBoard event files (tests/telemetry/test_tensorboard.py);
# python3-matplotlib: scripts/plot_run.py and its test. Both for Debian's /usr/bin/python3.
packages=(build-essential cmake openmpi-bin libopenmpi-dev libeigen3-dev libopenblas-dev nlohmann-json3-dev catch2 zlib1g-dev
          dataset-fashion-mnist python3-protobuf python3-matplotlib)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all dependencies present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
