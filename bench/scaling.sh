#!/usr/bin/env bash
# Weak scaling of the real trainer: per-rank batch fixed, 1 thread per rank, N ranks = each of $RANKS.
# For each workload, throughput (median samples/s over logged windows after the first) and
# efficiency = throughput_N / (N x throughput_1), with the bottleneck named from the trainer's own phase times.
# Usage: bench/scaling.sh [--ranks "1 2"] [--json FILE] [--quick] [--only NAME] [--repeat K] [--ceiling] [--set key=value]...
# --repeat K runs the N = 1, 2, ... sequence K times back to back and reports, per N, the median over the K rounds of
# each round's own efficiency (so a noisy neighbour that slows one round slows both of its terms).
# --ceiling also runs, per round and N > 1, N independent single-rank trainers at once, each pinned to its own core:
# what the machine gives N copies of the work with no communication at all (shared caches, memory bandwidth, other
# tenants). "ceiling" = their summed throughput / (N x throughput_1); "of ceiling" = our efficiency / ceiling, the
# part of the loss that synchronisation causes. "slowest-rank wait %" is summary.json's stragglers.wait_for_slowest_fraction:
# the share of the run the ranks spent waiting for the slowest rank's local work (imbalance, not the network).
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
ceiling=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --json) json_out="$2"; shift 2 ;;
    --quick) scale=4; shift ;;
    --only) only="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --ceiling) ceiling=1; shift ;;
    --set) extra+=(--set "$2"); shift 2 ;;
    *) echo "usage: bench/scaling.sh [--ranks \"1 2\"] [--json FILE] [--quick] [--only NAME] [--repeat K] [--ceiling] [--set key=value]..." >&2; exit 2 ;;
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
    train_args=(train --config "$root/configs/$cfg.json" --set train.max_steps="$steps" --set train.epochs=1000
      --set train.log_every_steps="$every" --set checkpoint.every_epochs=0 --set output.progress=none ${extra[@]+"${extra[@]}"})
    mpirun --oversubscribe --bind-to "$bind" -np "$n" "$bin" "${train_args[@]}" --set output.dir="$dir" >/dev/null 2>"$dir.log" \
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
                  "phase_s": ph, "bottleneck": max(parts, key=parts.get), "bytes_sent": s["bytes_sent"], "backend": s["backend"],
                  "wait_for_slowest": s["stragglers"].get("wait_for_slowest_fraction", 0.0)}))
PY
    [ "$ceiling" = 1 ] && [ "$n" -gt 1 ] || continue
    # N independent single-rank trainers at once, copy i pinned to core i mod nproc.
    pids=()
    for i in $(seq 0 $((n - 1))); do
      mpirun --bind-to none -np 1 taskset -c $((i % $(nproc))) "$bin" "${train_args[@]}" --set output.dir="$dir-alone$i" \
        >/dev/null 2>"$dir-alone$i.log" &
      pids+=($!)
    done
    for i in "${!pids[@]}"; do
      wait "${pids[$i]}" || { echo "bench/scaling.sh: $cfg, independent copy $i of $n failed:"; cat "$dir-alone$i.log"; exit 1; }
    done
    python3 - "$dir" "$cfg" "$n" "$round" >> "$rows" <<'PY'
import json, statistics, sys
d, cfg, n, rnd = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def rate(run):
    w = [r["samples_per_s"] for r in map(json.loads, open(run + "/metrics.jsonl")) if r["type"] == "step"]
    return statistics.median(w[1:] if len(w) > 2 else w)
print(json.dumps({"workload": cfg, "ranks": n, "round": rnd, "independent": True,
                  "samples_per_s": sum(rate(f"{d}-alone{i}") for i in range(n))}))
PY
  done
  done
done
python3 - "$rows" "$json_out" <<'PY'
import json, statistics, sys
every = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in every if not r.get("independent")]
base = {(r["workload"], r["round"]): r["samples_per_s"] for r in rows if r["ranks"] == 1}
alone = {(r["workload"], r["ranks"], r["round"]): r["samples_per_s"] for r in every if r.get("independent")}
for r in rows:
    b = base.get((r["workload"], r["round"]))
    r["efficiency"] = r["samples_per_s"] / (r["ranks"] * b) if b else None
    a = alone.get((r["workload"], r["ranks"], r["round"]))
    if a and b:
        r["ceiling"] = a / (r["ranks"] * b)
        r["of_ceiling"] = r["samples_per_s"] / a
has_ceiling = any("ceiling" in r for r in rows)
print(f"{'workload':<20} {'ranks':>5} {'batch/rank':>10} {'samples/s':>11} {'efficiency':>10}"
      + (f" {'ceiling':>8} {'of ceiling':>10}" if has_ceiling else "") + f"  {'sync_wait %':>11} {'slowest-rank wait %':>19}  bottleneck"
      + ("   per-round efficiency" if max(r["round"] for r in rows) > 1 else ""))
for key in dict.fromkeys((r["workload"], r["ranks"]) for r in rows):
    group = [r for r in rows if (r["workload"], r["ranks"]) == key]
    effs = [r["efficiency"] for r in group if r["efficiency"] is not None]
    rate = statistics.median(r["samples_per_s"] for r in group)
    eff = f"{statistics.median(effs):.2f}" if effs else "-"
    ceil = ""
    if has_ceiling:
        cs = [r["ceiling"] for r in group if "ceiling" in r]
        oc = [r["of_ceiling"] for r in group if "of_ceiling" in r]
        ceil = f" {statistics.median(cs):>8.2f} {statistics.median(oc):>10.2f}" if cs else f" {'-':>8} {'-':>10}"
    ph = {k: statistics.median(r["phase_s"][k] for r in group) for k in group[0]["phase_s"]}
    tot = sum(ph.values()) or 1
    per_round = "   " + " ".join(f"{e:.2f}" for e in effs) if len(group) > 1 else ""
    print(f"{key[0]:<20} {key[1]:>5} {group[0]['batch_per_rank']:>10} {rate:>11.0f} {eff:>10}{ceil}  "
          f"{100 * ph['sync_wait'] / tot:>10.1f}% {100 * statistics.median(r['wait_for_slowest'] for r in group):>18.1f}%  "
          f"{group[0]['bottleneck']}{per_round}")
if sys.argv[2]:
    json.dump(every, open(sys.argv[2], "w"), indent=2)
PY
