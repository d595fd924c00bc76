#!/usr/bin/env bash
# Input pipeline, ours vs torchvision, per core (issue 17): writes two JPEG folders (small 96x96 and large 1600x1200,
# with bench_image_pipeline --make-folder: nothing committed or downloaded), then runs bench_image_pipeline (modes:
# crop = decode_transform_image, the crop region decoded at a DCT scale, what the folder reader runs; whole = the
# whole picture at a DCT scale; full = no DCT scaling, as torchvision) and torchvision_pipeline.py (ImageFolder + DataLoader, num_workers=0, one torch thread)
# interleaved, ROUNDS rounds, all pinned to one core, and prints images/s per round and the ratios.
# crop runs two epochs and reports them apart: epoch 1 (crop_e1) entropy-decodes every file to its end, as a file's
# first read in the folder reader does; epoch 2 (crop_e2) stops after each crop's last row, as the reader does for a
# file it has decoded completely before (DecodeExtent::RegionRows). torchvision's epochs all cost the same.
# Transforms on both sides: RandomResizedCrop(scale 0.08..1) to 64x64 (small) / 224x224 (large),
# RandomHorizontalFlip, ToTensor, Normalize (ImageNet mean/std). Each rate is given by the wall clock and per CPU-second
# of the process (on a shared machine the wall clock also counts the time other processes held the core).
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
"$python" -c "import torchvision" 2>/dev/null ||
  { echo "compare.sh: $python cannot import torchvision (apt-get install python3-torchvision; benchmark only)" >&2; exit 2; }
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
wall_rate() { sed -n 's/.*images\/s \([0-9.]*\),.*/\1/p'; }
cpu_rate() { sed -n 's/.*per CPU-second \([0-9.]*\).*/\1/p'; }

for set in small large; do
  if [[ $set == small ]]; then size=(64 64); else size=(224 224); fi
  echo "== $set JPEGs -> ${size[0]}x${size[1]}, pinned to core $core"
  printf '%-6s %-14s %9s %9s %9s %9s %11s %9s %9s %9s %9s\n' round clock crop_e1 crop_e2 whole full torchvision \
    e1/tv e2/tv whole/tv full/tv
  for r in $(seq 1 "$rounds"); do
    crop=$("${pin[@]}" "$bin" --dir "$work/$set" --size "${size[@]}" --mode crop --passes 2)
    whole=$("${pin[@]}" "$bin" --dir "$work/$set" --size "${size[@]}" --mode whole)
    full=$("${pin[@]}" "$bin" --dir "$work/$set" --size "${size[@]}" --mode full)
    tv=$("${pin[@]}" "$python" "$here/torchvision_pipeline.py" --dir "$work/$set" --size "${size[@]}")
    for clock in wall cpu; do
      if [[ $clock == wall ]]; then pick=wall_rate; label="wall images/s"; else pick=cpu_rate; label="images/CPU-s"; fi
      awk -v r="$r" -v l="$label" -v c="$(grep 'epoch 1' <<<"$crop" | $pick)" \
        -v e="$(grep 'later epochs' <<<"$crop" | $pick)" -v d="$($pick <<<"$whole")" -v f="$($pick <<<"$full")" \
        -v t="$($pick <<<"$tv")" \
        'BEGIN { printf "%-6s %-14s %9.1f %9.1f %9.1f %9.1f %11.1f %9.2f %9.2f %9.2f %9.2f\n", r, l, c, e, d, f, t,
                 c / t, e / t, d / t, f / t }'
    done
    echo "       load: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
echo "== after: $(uptime)"
