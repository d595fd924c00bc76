#!/usr/bin/env bash
# Sparse weak scaling 1 -> 2 ranks with a default on and off, same binary, interleaved per round and batch: 1 rank
# pinned to cpu 1, then 2 ranks bound one to a core with the default, then with the switch's variable set to 0.
#   --switch RINGTRAIN_SHARED_MEMORY (default): the per-step collectives through the ring's shared-memory segment vs
#            Open MPI's (bench/RESULTS.md, "Sparse collectives through shared memory")
#   --switch RINGTRAIN_PEER_PARSING: ranks parsing each other's rows in their waits vs each its own (bench/RESULTS.md,
#            "Peer parsing")
# --ceiling adds the ceiling per round and batch: two independent 1-rank copies at once, pinned to cpus 0 and 1
# (their summed rate over twice the 1-rank rate: what 2 ranks could reach with no communication at all).
# Usage: bench/sparse/collectives_ab.sh [--rounds R] [--rows N] [--batches "256 1024 4096"] [--switch VAR] [--ceiling]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${RINGTRAIN_BIN:-$root/build/ringtrain}
rounds=4 rows=3000000 batches="256 1024 4096" switch=RINGTRAIN_SHARED_MEMORY ceiling=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --switch) switch=$2; shift 2 ;;
    --ceiling) ceiling=1; shift ;;
    *) echo "collectives_ab.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "collectives_ab.sh: no ringtrain at $bin (build it, or set RINGTRAIN_BIN)" >&2; exit 2; }
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
w=$(mktemp -d /tmp/rt-sparse-ab.XXXXXX)
trap 'rm -rf "$w"' EXIT
"$bin" make-clicklog --format libsvm --rows "$rows" --features 1048576 --seed 1 --model-seed 7 --out "$w/train.svm" >/dev/null 2>&1
"$bin" make-clicklog --format libsvm --rows 100000 --features 1048576 --seed 2 --model-seed 7 --out "$w/test.svm" >/dev/null 2>&1
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $rows rows, 2^20 features, AdaGrad, owner updates"
args=(train --config "$root/configs/sparse_logreg_libsvm.json" --set data.train_file="$w/train.svm"
  --set data.test_file="$w/test.svm" --set data.num_features=1048576 --set data.shuffle_buffer=0 --set train.epochs=1
  --set train.threads=1 --set optimizer.name=adagrad --set optimizer.lr=0.05 --set optimizer.lr_scaling=none
  --set checkpoint.every_epochs=0 --set output.progress=none --set sync.sparse=auto)
run() {  # run "$@" into $w/log; on failure show the log's end and stop
  "$@" >"$w/log" 2>&1 || { echo "collectives_ab.sh: a run failed ($*); its log ends:" >&2; tail -5 "$w/log" >&2; exit 1; }
}
rate() {  # samples/s and the sync_wait phase of a run's summary
  /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(round(s['samples_per_s']), round(s['phase_s']['sync_wait'], 3))" "$1/summary.json"
}
printf "%-6s %-6s %-10s %-22s %-22s %s\n" round batch "1 rank" "2 ranks on (wait s)" "2 ranks $switch=0 (wait s)" \
  "efficiency on / off$([ $ceiling = 1 ] && echo ' / ceiling')"
for r in $(seq "$rounds"); do
  for b in $batches; do
    rm -rf "$w/one" "$w/shm" "$w/mpi"  # a run resumes from a checkpoint left in its output folder
    run taskset -c 1 "$bin" "${args[@]}" --set train.batch_size="$b" --set output.dir="$w/one"
    run mpirun --bind-to core -np 2 "$bin" "${args[@]}" --set train.batch_size="$b" --set output.dir="$w/shm"
    run env "$switch=0" mpirun --bind-to core -x "$switch" -np 2 "$bin" "${args[@]}" \
      --set train.batch_size="$b" --set output.dir="$w/mpi"
    read -r one _ < <(rate "$w/one"); read -r shm ws < <(rate "$w/shm"); read -r mpi wm < <(rate "$w/mpi")
    ceil=""
    if [ "$ceiling" = 1 ]; then
      rm -rf "$w/c0" "$w/c1"
      taskset -c 0 "$bin" "${args[@]}" --set train.batch_size="$b" --set output.dir="$w/c0" >"$w/log0" 2>&1 & p0=$!
      taskset -c 1 "$bin" "${args[@]}" --set train.batch_size="$b" --set output.dir="$w/c1" >"$w/log1" 2>&1 & p1=$!
      wait $p0 && wait $p1 || { echo "collectives_ab.sh: a ceiling copy failed" >&2; tail -5 "$w/log0" "$w/log1" >&2; exit 1; }
      read -r c0 _ < <(rate "$w/c0"); read -r c1 _ < <(rate "$w/c1")
      ceil=$(/usr/bin/python3 -c "print(' / %.2f' % (($c0 + $c1) / (2 * $one)))")
    fi
    printf "%-6s %-6s %-10s %-22s %-22s %.2f / %.2f%s\n" "$r" "$b" "$one" "$shm ($ws)" "$mpi ($wm)" \
      "$(/usr/bin/python3 -c "print($shm / (2 * $one))")" "$(/usr/bin/python3 -c "print($mpi / (2 * $one))")" "$ceil"
  done
done
