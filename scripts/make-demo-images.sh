#!/usr/bin/env bash
# Builds a demo image-quality folder (data.format image_folder, classes `degraded` and `sharp`) from photos that
# Debian packages ship: python3-matplotlib's sample photo (Grace Hopper, /usr/share/matplotlib/mpl-data/sample_data)
# and any JPEG over 20 kB under /usr/share/backgrounds, /usr/share/wallpapers and /usr/share/pixmaps (desktop-base,
# GNOME/KDE backgrounds where installed). Each class holds the same random crops of those photos, as they are and
# blurred or JPEG-compressed at quality 5-15, written by ringtrain's own make-image-folder (docs/images.md).
# Usage: scripts/make-demo-images.sh DIR      (writes DIR/train and DIR/test; configs/quality_cnn_folder.json reads
#                                               data/quality_demo)
#   RINGTRAIN   the binary (default build/ringtrain)
#   PER_CLASS   training crops per class (default 1000; the test folder gets a quarter, other crops)
#   SIZE        crop size (default 96x96; the quality CNN resizes to 64x64)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -ne 1 ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
out="$1"
bin="${RINGTRAIN:-$root/build/ringtrain}"
per_class="${PER_CLASS:-1000}"
size="${SIZE:-96x96}"
if [ ! -x "$bin" ]; then
  echo "$0: $bin is not built; run scripts/build.sh or set RINGTRAIN" >&2
  exit 2
fi
photos=()
for f in /usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg; do
  [ -f "$f" ] && photos+=("$f")
done
for d in /usr/share/backgrounds /usr/share/wallpapers /usr/share/pixmaps; do
  [ -d "$d" ] || continue
  while IFS= read -r f; do photos+=("$f"); done < <(find "$d" -iname '*.jpg' -size +20k | sort)
done
if [ ${#photos[@]} -eq 0 ]; then
  echo "$0: no photo found; install python3-matplotlib (apt-get install python3-matplotlib) for its sample photo" >&2
  exit 2
fi
list="$(IFS=,; echo "${photos[*]}")"
if [ -e "$out/train" ] || [ -e "$out/test" ]; then
  echo "$0: $out/train or $out/test exists; remove it or name another folder" >&2
  exit 2
fi
"$bin" make-image-folder --photos "$list" --out "$out/train" --per-class "$per_class" --size "$size" --seed 1
"$bin" make-image-folder --photos "$list" --out "$out/test" --per-class $((per_class / 4)) --size "$size" --seed 2
echo "demo images: ${#photos[@]} photo(s) -> $out/train and $out/test (classes degraded, sharp)"
