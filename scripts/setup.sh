#!/usr/bin/env bash
# Installs ringtrain's build and test dependencies from Debian's packages (idempotent: quick when present).
set -euo pipefail

# python3-protobuf: the independent decoder of the TensorBoard event files (tests/telemetry/test_tensorboard.py);
# python3-matplotlib: scripts/plot_run.py and its test. Both for Debian's /usr/bin/python3.
# slurmctld slurmd slurm-client munge: the real Slurm of the `slurm` tests (tests/cluster; scripts/cluster/start-slurm.sh,
# slurm-netns.sh); iproute2 util-linux: the network namespaces of the `netns` tests (ip netns, nsenter, unshare).
# Benchmark references only, not installed here: python3-torch, python3-torchvision (bench/*/compare.sh say so).
# The daemons are not started by installing them (no systemd here); the tests start private ones.
# libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev: JPEG (TurboJPEG, and libjpeg for crop-region decoding) and PNG
# decoding of image folders (src/data/image_*.cpp);
# libdnnl-dev: oneDNN, the CPU convolutions train.cpu_conv can pick (optional at build time; im2col without it);
# ocl-icd-opencl-dev: Debian's oneDNN CMake package requires OpenCL's headers (only a Recommends, so not pulled in).
packages=(build-essential cmake openmpi-bin libopenmpi-dev libeigen3-dev libopenblas-dev libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev catch2 zlib1g-dev
          libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev
          dataset-fashion-mnist python3-protobuf python3-matplotlib
          slurmctld slurmd slurm-client munge iproute2 util-linux)

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
