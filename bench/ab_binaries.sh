#!/usr/bin/env bash
# A/B of two ringtrain builds on the same workloads, interleaved round by round (A, B, A, B, ...), so drift of a noisy
# VM hits both sides alike. Reports, per workload and rank count, each side's samples/s range over the rounds and the
# range of the per-round ratio B/A. For refactors ("no change in throughput") and for one change at a time.
# Usage: bench/ab_binaries.sh OLD_BINARY NEW_BINARY [--rounds K] [--ranks "1 2"] [--steps S]
# Needs python3 (reads the summary.json each run writes).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bench/ab_binaries.sh OLD_BINARY NEW_BINARY [--rounds K] [--ranks \"1 2\"] [--steps S]" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
a="$1"; b="$2"; shift 2
rounds=5; ranks="1 2"; steps=600
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    *) echo "bench/ab_binaries.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for bin in "$a" "$b"; do [ -x "$bin" ] || { echo "bench/ab_binaries.sh: $bin is not an executable" >&2; exit 2; }; done
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
# workload name, config, extra settings (steps scale with the model's cost)
workloads=("logreg configs/logreg_fashion.json $steps" "lenet5 configs/lenet5_fashion.json $((steps / 4))")
results="$tmp/results.txt"
for w in "${workloads[@]}"; do
  read -r name config nsteps <<<"$w"
  for n in $ranks; do
    for r in $(seq 1 "$rounds"); do
      for side in A B; do
        bin="$a"; [ "$side" = B ] && bin="$b"
        out="$tmp/$name-$n-$r-$side"
        mpirun --oversubscribe --bind-to none -np "$n" "$bin" train --config "$root/$config" \
          --set train.max_steps="$nsteps" --set train.epochs=100 --set checkpoint.every_epochs=0 \
          --set output.progress=none --set output.dir="$out" >/dev/null 2>"$out.err" ||
          { echo "bench/ab_binaries.sh: $side failed on $name N=$n:" >&2; cat "$out.err" >&2; exit 1; }
        python3 -c "import json,sys; print('$name', $n, $r, '$side', json.load(open('$out/summary.json'))['samples_per_s'])" >>"$results"
      done
    done
  done
done
python3 - "$results" "$a" "$b" <<'PY'
import sys, collections
rows = [l.split() for l in open(sys.argv[1])]
v = collections.defaultdict(dict)
for name, n, r, side, sps in rows:
    v[(name, int(n))].setdefault(side, {})[int(r)] = float(sps)
print(f"A = {sys.argv[2]}\nB = {sys.argv[3]}")
print(f"{'workload':8} {'N':>2} {'A samples/s (min-max)':>24} {'B samples/s (min-max)':>24} {'B/A per round (min-med-max)':>30}")
for (name, n), sides in sorted(v.items()):
    A, B = sides['A'], sides['B']
    ratios = sorted(B[r] / A[r] for r in A)
    med = ratios[len(ratios) // 2]
    print(f"{name:8} {n:>2} {min(A.values()):>11.0f}-{max(A.values()):<12.0f} {min(B.values()):>11.0f}-{max(B.values()):<12.0f}"
          f" {ratios[0]:>12.3f}-{med:.3f}-{ratios[-1]:.3f}")
PY
