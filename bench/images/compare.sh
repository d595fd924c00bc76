#!/usr/bin/env bash
# Input pipeline, ours vs torchvision, per core (issue 17): writes two JPEG folders (small 96x96 and large 1600x1200,
# with bench_image_pipeline --make-folder: nothing committed or downloaded), then runs bench_image_pipeline (with and
# without DCT scaling) and torchvision_pipeline.py (ImageFolder + DataLoader, num_workers=0, one torch thread)
# interleaved, ROUNDS rounds, all pinned to one core, and prints images/s per round and the ratios.
# Transforms on both sides: RandomResizedCrop(scale 0.08..1) to 64x64 (small) / 224x224 (large),
# RandomHorizontalFlip, ToTensor, Normalize (ImageNet mean/std).
#
#   bench/images/compare.sh [path/to/bench_image_pipeline]
#   env: ROUNDS (3), CORE (1), SMALL_COUNT (2000), LARGE_COUNT (150), KEEP_DIR (reuse/keep the folders there)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-build/bench/images/bench_image_pipeline}
[[ -x $bin ]] || { echo "compare.sh: $bin not found: build the target bench_image_pipeline (RINGTRAIN_BENCH=ON) and pass its path" >&2; exit 2; }
rounds=${ROUNDS:-3}
core=${CORE:-1}
python=/usr/bin/python3
if [[ -n ${KEEP_DIR:-} ]]; then
  work=$KEEP_DIR
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
[[ -d $work/small ]] || "$bin" --make-folder "$work/small" --count "${SMALL_COUNT:-2000}" --height 96 --width 96
[[ -d $work/large ]] || "$bin" --make-folder "$work/large" --count "${LARGE_COUNT:-150}" --height 1200 --width 1600

echo "== machine: $(uptime)"
taskset -c "$core" "$python" "$here/torchvision_pipeline.py" --info
pin=(taskset -c "$core")
rate() { sed -n 's/.*images\/s \([0-9.]*\).*/\1/p'; }

for set in small large; do
  if [[ $set == small ]]; then size=(64 64); else size=(224 224); fi
  echo "== $set JPEGs -> ${size[0]}x${size[1]}, pinned to core $core"
  printf '%-6s %12s %12s %12s %10s %10s\n' round ours_dct ours_full torchvision dct/tv full/tv
  for r in $(seq 1 "$rounds"); do
    dct=$("${pin[@]}" "$bin" --dir "$work/$set" --size "${size[@]}" | rate)
    full=$("${pin[@]}" "$bin" --dir "$work/$set" --size "${size[@]}" --no-dct | rate)
    tv=$("${pin[@]}" "$python" "$here/torchvision_pipeline.py" --dir "$work/$set" --size "${size[@]}" | rate)
    awk -v r="$r" -v d="$dct" -v f="$full" -v t="$tv" \
      'BEGIN { printf "%-6s %12.1f %12.1f %12.1f %10.2f %10.2f\n", r, d, f, t, d / t, f / t }'
  done
done
echo "== after: $(uptime)"
