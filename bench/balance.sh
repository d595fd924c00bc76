#!/usr/bin/env bash
# sync.balance off vs speed at N = 2, interleaved, with the 1-rank baseline in every round.
# Per round and workload: 1 rank pinned to core 1, then 2 ranks (--bind-to core) with sync.balance off, then speed
# (the order of the two alternates between rounds). Efficiency = 2-rank samples/s / (2 x 1-rank samples/s), samples/s
# being the median over logged windows after the first (as bench/scaling.sh).
# --hog runs a busy loop on core 0 during the 2-rank runs: rank 0 then gets about half of its core, a persistently
# slower rank (the 1-rank baseline stays on the free core 1, so the ideal is (0.5 + 1) / 2 = 0.75 with balancing and
# 0.5 without).
# --slow F (root, cgroup v1 or v2 cpu controller) puts rank 0 of the 2-rank runs in a CPU cgroup limited to F of a core
# (CFS quota F x 2 ms per 2 ms): a rank in a container with a CPU limit, as Kubernetes sets them. Its waits spin on
# that quota too. Ideal with balancing: (F + 1) / 2.
# Usage: bench/balance.sh [--rounds K] [--only NAME] [--hog | --slow F] [--json FILE]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${BUILD_DIR:-$root/build}/ringtrain"
rounds=3
only=""
hog=0
slow=""
json_out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --hog) hog=1; shift ;;
    --slow) slow="$2"; shift 2 ;;
    --json) json_out="$2"; shift 2 ;;
    *) echo "usage: bench/balance.sh [--rounds K] [--only NAME] [--hog | --slow F] [--json FILE]" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "bench/balance.sh: $bin not found; run scripts/build.sh first" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "bench/balance.sh: needs 2 cores (2 ranks bound one to a core)" >&2; exit 2; }
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# --slow: a cgroup for rank 0 (v1: cpu/ringtrain-slow with cfs_quota_us; v2: ringtrain-slow with cpu.max).
slow_procs=""
if [ -n "$slow" ]; then
  [ "$(id -u)" -eq 0 ] || { echo "bench/balance.sh: --slow needs root (a CPU cgroup)" >&2; exit 2; }
  quota=$(python3 -c "import sys; f=float(sys.argv[1]); assert 0.5 <= f <= 1, 'F must be in [0.5, 1]'; print(int(f*2000))" "$slow") \
    || { echo "bench/balance.sh: --slow $slow: give a fraction of a core from 0.5 to 1" >&2; exit 2; }
  if [ -d /sys/fs/cgroup/cpu ]; then
    cg=/sys/fs/cgroup/cpu/ringtrain-slow; mkdir -p "$cg"
    echo 2000 > "$cg/cpu.cfs_period_us"; echo "$quota" > "$cg/cpu.cfs_quota_us"
  elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    cg=/sys/fs/cgroup/ringtrain-slow; mkdir -p "$cg"
    echo "$quota 2000" > "$cg/cpu.max"
  else
    echo "bench/balance.sh: --slow: no cgroup cpu controller under /sys/fs/cgroup" >&2; exit 2
  fi
  slow_procs="$cg/cgroup.procs"
fi

# workload: config, steps (as bench/scaling.sh)
workloads=("logreg_fashion 1200" "lenet5_fashion 400" "mnist_cnn_fashion 40")
out="$(mktemp -d /tmp/ringtrain-balance.XXXXXX)"
rows="$out/rows.jsonl"
: > "$rows"
hog_pid=""
trap '[ -z "$hog_pid" ] || kill "$hog_pid" 2>/dev/null || true' EXIT
start_hog() { [ "$hog" = 1 ] || return 0; taskset -c 0 bash -c 'while :; do :; done' & hog_pid=$!; }
stop_hog() { [ -z "$hog_pid" ] || { kill "$hog_pid"; wait "$hog_pid" 2>/dev/null || true; hog_pid=""; }; }

run() {  # dir ranks balance cfg steps
  local dir="$1" n="$2" balance="$3" cfg="$4" steps="$5"
  local args=(train --config "$root/configs/$cfg.json" --set train.max_steps="$steps" --set train.epochs=1000
    --set train.log_every_steps=$((steps / 10)) --set checkpoint.every_epochs=0 --set output.progress=none
    --set sync.balance="$balance" --set output.dir="$dir")
  if [ "$n" = 1 ]; then
    taskset -c 1 "$bin" "${args[@]}" >/dev/null 2>"$dir.log"
  elif [ -n "$slow_procs" ]; then
    # MPMD: rank 0 enters the cgroup, then becomes the trainer.
    mpirun --bind-to core -np 1 bash -c 'echo $$ > "$0"; exec "$@"' "$slow_procs" "$bin" "${args[@]}" \
      : -np 1 "$bin" "${args[@]}" >/dev/null 2>"$dir.log"
  else
    mpirun --bind-to core -np 2 "$bin" "${args[@]}" >/dev/null 2>"$dir.log"
  fi || { echo "bench/balance.sh: $cfg ($n ranks, $balance) failed:"; cat "$dir.log"; exit 1; }
}

for round in $(seq "$rounds"); do
  for w in "${workloads[@]}"; do
    read -r cfg steps <<< "$w"
    [ -z "$only" ] || [[ "$cfg" == *"$only"* ]] || continue
    run "$out/$cfg-one-$round" 1 off "$cfg" "$steps"
    order="off speed"; [ $((round % 2)) = 0 ] && order="speed off"
    for b in $order; do
      start_hog
      run "$out/$cfg-$b-$round" 2 "$b" "$cfg" "$steps"
      stop_hog
    done
    python3 - "$out" "$cfg" "$round" >> "$rows" <<'PY'
import json, statistics, sys
out, cfg, r = sys.argv[1], sys.argv[2], sys.argv[3]
def sps(d):
    steps = [json.loads(l) for l in open(d + "/metrics.jsonl")]
    v = [x["samples_per_s"] for x in steps if x.get("type") == "step"][1:]
    return statistics.median(v)
one = sps(f"{out}/{cfg}-one-{r}")
row = {"workload": cfg, "round": int(r), "one_rank_sps": one}
for b in ("off", "speed"):
    d = f"{out}/{cfg}-{b}-{r}"
    s = json.load(open(d + "/summary.json"))
    row[b] = {"sps": sps(d), "efficiency": sps(d) / (2 * one),
              "slowest_wait": s["stragglers"].get("wait_for_slowest_fraction"),
              "balance": s["sync"]["balance"]}
print(json.dumps(row))
PY
    tail -1 "$rows" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%-18s round %d  1 rank %9.0f/s  off: eff %.3f wait %.3f  speed: eff %.3f wait %.3f  last split %s" % (r["workload"], r["round"], r["one_rank_sps"], r["off"]["efficiency"], r["off"]["slowest_wait"], r["speed"]["efficiency"], r["speed"]["slowest_wait"], r["speed"]["balance"].get("batch_last_per_rank")))'
  done
done
python3 - "$rows" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n| workload | rounds | efficiency off (median, range) | speed (median, range) | slowest-rank wait off | speed |")
print("|---|---|---|---|---|---|")
for w in dict.fromkeys(r["workload"] for r in rows):
    rs = [r for r in rows if r["workload"] == w]
    def col(b, k):
        v = [r[b][k] for r in rs]
        return "%.2f (%.2f–%.2f)" % (statistics.median(v), min(v), max(v))
    print(f"| {w} | {len(rs)} | {col('off','efficiency')} | {col('speed','efficiency')} | {col('off','slowest_wait')} | {col('speed','slowest_wait')} |")
PY
[ -z "$json_out" ] || cp "$rows" "$json_out"
echo "runs: $out"
