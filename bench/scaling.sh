#!/usr/bin/env bash
# Weak scaling of the real trainer: per-rank batch fixed, 1 thread per rank, N ranks = each of $RANKS.
# For each workload, throughput (median samples/s over logged windows after the first) and
# efficiency = throughput_N / (N x throughput_1), with the bottleneck named from the trainer's own phase times.
# Usage: bench/scaling.sh [--ranks "1 2"] [--json FILE] [--quick] [--only NAME] [--repeat K] [--set key=value]...
# --repeat K runs the N = 1, 2, ... sequence K times back to back and reports, per N, the median over the K rounds of
# each round's own efficiency (so a noisy neighbour that slows one round slows both of its terms).
# Needs a build (scripts/build.sh) and python3 (for reading the JSON the trainer writes).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${BUILD_DIR:-$root/build}/ringtrain"
ranks="1 2"
json_out=""
scale=1
repeat=1
extra=()
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --json) json_out="$2"; shift 2 ;;
    --quick) scale=4; shift ;;
    --only) only="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --set) extra+=(--set "$2"); shift 2 ;;
    *) echo "usage: bench/scaling.sh [--ranks \"1 2\"] [--json FILE] [--quick] [--only NAME] [--repeat K] [--set key=value]..." >&2; exit 2 ;;
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
  for round in $(seq "$repeat"); do
  for n in $ranks; do
    dir="$out/$cfg-np$n-r$round"
    bind=core; [ "$n" -le "$(nproc)" ] || bind=none
    mpirun --oversubscribe --bind-to "$bind" -np "$n" "$bin" train --config "$root/configs/$cfg.json" \
      --set train.max_steps="$steps" --set train.epochs=1000 --set train.log_every_steps="$every" \
      --set checkpoint.every_epochs=0 --set output.progress=none --set output.dir="$dir" ${extra[@]+"${extra[@]}"} >/dev/null 2>"$dir.log" \
      || { echo "bench/scaling.sh: $cfg at $n ranks failed:"; cat "$dir.log"; exit 1; }
    python3 - "$dir" "$cfg" "$n" "$round" >> "$rows" <<'PY'
import json, statistics, sys
d, cfg, n, rnd = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = json.load(open(d + "/summary.json"))
windows = [r["samples_per_s"] for r in map(json.loads, open(d + "/metrics.jsonl")) if r["type"] == "step"]
rate = statistics.median(windows[1:] if len(windows) > 2 else windows)
ph = s["phase_s"]
parts = {"compute": ph["forward"] + ph["backward"] + ph["optimizer"], "communication": ph["sync_wait"], "input pipeline": ph["data"]}
print(json.dumps({"workload": cfg, "ranks": n, "round": rnd, "batch_per_rank": s["batch_size_per_rank"], "samples_per_s": rate,
                  "phase_s": ph, "bottleneck": max(parts, key=parts.get), "bytes_sent": s["bytes_sent"], "backend": s["backend"]}))
PY
  done
  done
done
python3 - "$rows" "$json_out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = {(r["workload"], r["round"]): r["samples_per_s"] for r in rows if r["ranks"] == 1}
for r in rows:
    b = base.get((r["workload"], r["round"]))
    r["efficiency"] = r["samples_per_s"] / (r["ranks"] * b) if b else None
print(f"{'workload':<20} {'ranks':>5} {'batch/rank':>10} {'samples/s':>11} {'efficiency':>10}  {'sync_wait %':>11}  bottleneck"
      + ("   per-round efficiency" if max(r["round"] for r in rows) > 1 else ""))
for key in dict.fromkeys((r["workload"], r["ranks"]) for r in rows):
    group = [r for r in rows if (r["workload"], r["ranks"]) == key]
    effs = [r["efficiency"] for r in group if r["efficiency"] is not None]
    rate = statistics.median(r["samples_per_s"] for r in group)
    eff = f"{statistics.median(effs):.2f}" if effs else "-"
    ph = {k: statistics.median(r["phase_s"][k] for r in group) for k in group[0]["phase_s"]}
    tot = sum(ph.values()) or 1
    per_round = "   " + " ".join(f"{e:.2f}" for e in effs) if len(group) > 1 else ""
    print(f"{key[0]:<20} {key[1]:>5} {group[0]['batch_per_rank']:>10} {rate:>11.0f} {eff:>10}  "
          f"{100 * ph['sync_wait'] / tot:>10.1f}%  {group[0]['bottleneck']}{per_round}")
if sys.argv[2]:
    json.dump(rows, open(sys.argv[2], "w"), indent=2)
PY
