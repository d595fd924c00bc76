#!/usr/bin/env bash
# Weak scaling of the real trainer: per-rank batch fixed, 1 thread per rank, N ranks = each of $RANKS.
# For each workload, throughput (median samples/s over logged windows after the first) and
# efficiency = throughput_N / (N x throughput_1), with the bottleneck named from the trainer's own phase times.
# Usage: bench/scaling.sh [--ranks "1 2"] [--json FILE] [--quick] [--only NAME] [--set key=value]...
# Needs a build (scripts/build.sh) and python3 (for reading the JSON the trainer writes).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${BUILD_DIR:-$root/build}/ringtrain"
ranks="1 2"
json_out=""
scale=1
extra=()
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --json) json_out="$2"; shift 2 ;;
    --quick) scale=4; shift ;;
    --only) only="$2"; shift 2 ;;
    --set) extra+=(--set "$2"); shift 2 ;;
    *) echo "usage: bench/scaling.sh [--ranks \"1 2\"] [--json FILE] [--quick] [--only NAME] [--set key=value]..." >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "bench/scaling.sh: $bin not found; run scripts/build.sh first" >&2; exit 2; }
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# workload: config, steps, log window
workloads=(
  "logreg_fashion $((1200 / scale)) $((120 / scale))"
  "lenet5_fashion $((400 / scale)) $((40 / scale))"
  "mnist_cnn_fashion $((40 / scale)) $((5 / scale > 0 ? 5 / scale : 1))"
)
out="$(mktemp -d /tmp/ringtrain-scaling.XXXXXX)"
rows="$out/rows.jsonl"
: > "$rows"
for w in "${workloads[@]}"; do
  read -r cfg steps every <<< "$w"
  [ -z "$only" ] || [[ "$cfg" == *"$only"* ]] || continue
  for n in $ranks; do
    dir="$out/$cfg-np$n"
    bind=core; [ "$n" -le "$(nproc)" ] || bind=none
    mpirun --oversubscribe --bind-to "$bind" -np "$n" "$bin" train --config "$root/configs/$cfg.json" \
      --set train.max_steps="$steps" --set train.epochs=1000 --set train.log_every_steps="$every" \
      --set checkpoint.every_epochs=0 --set output.progress=none --set output.dir="$dir" ${extra[@]+"${extra[@]}"} >/dev/null 2>"$dir.log" \
      || { echo "bench/scaling.sh: $cfg at $n ranks failed:"; cat "$dir.log"; exit 1; }
    python3 - "$dir" "$cfg" "$n" >> "$rows" <<'PY'
import json, statistics, sys
d, cfg, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = json.load(open(d + "/summary.json"))
windows = [r["samples_per_s"] for r in map(json.loads, open(d + "/metrics.jsonl")) if r["type"] == "step"]
rate = statistics.median(windows[1:] if len(windows) > 2 else windows)
ph = s["phase_s"]
parts = {"compute": ph["forward"] + ph["backward"] + ph["optimizer"], "communication": ph["sync_wait"], "input pipeline": ph["data"]}
print(json.dumps({"workload": cfg, "ranks": n, "batch_per_rank": s["batch_size_per_rank"], "samples_per_s": rate,
                  "phase_s": ph, "bottleneck": max(parts, key=parts.get), "bytes_sent": s["bytes_sent"], "backend": s["backend"]}))
PY
  done
done
python3 - "$rows" "$json_out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = {r["workload"]: r["samples_per_s"] for r in rows if r["ranks"] == 1}
print(f"{'workload':<20} {'ranks':>5} {'batch/rank':>10} {'samples/s':>11} {'efficiency':>10}  {'sync_wait %':>11}  bottleneck")
for r in rows:
    b = base.get(r["workload"])
    r["efficiency"] = r["samples_per_s"] / (r["ranks"] * b) if b else None
    ph = r["phase_s"]; tot = sum(ph.values()) or 1
    eff = f"{r['efficiency']:.2f}" if r["efficiency"] is not None else "-"
    print(f"{r['workload']:<20} {r['ranks']:>5} {r['batch_per_rank']:>10} {r['samples_per_s']:>11.0f} {eff:>10}  "
          f"{100 * ph['sync_wait'] / tot:>10.1f}%  {r['bottleneck']}")
if sys.argv[2]:
    json.dump(rows, open(sys.argv[2], "w"), indent=2)
PY
