#!/usr/bin/env bash
# Sparse logistic regression, ringtrain vs PyTorch on the same libsvm file, batch, optimizer (AdaGrad) and one core:
# interleaved rounds (ringtrain, PyTorch, ringtrain, PyTorch ...), each pinned to the same CPU with taskset.
# ringtrain's samples/s include parsing (pinned to one CPU, its reader parses the text file on the training thread);
# the PyTorch peer parses the file into CSR arrays before its clock starts (bench/sparse/pytorch_sparse_logreg.py).
# Then weak scaling 1 -> 2 ranks (sync.sparse auto) beside the ceiling (2 independent 1-rank copies at once).
# Usage: bench/sparse/compare.sh [--rounds R] [--rows N] [--features F] [--batch B] [--json FILE]
# Results and the command used: bench/RESULTS.md, "Sparse logistic regression".
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${RINGTRAIN_BIN:-$root/build/ringtrain}
py=/usr/bin/python3  # Debian's interpreter: python3-torch lives in its dist-packages
rounds=3 rows=400000 features=1048576 batch=256 lr=0.05 json_out="" cpu=${BENCH_CPU:-1}
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --features) features=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "compare.sh: no ringtrain at $bin (build it, or set RINGTRAIN_BIN)" >&2; exit 2; }
"$py" -c "import torch" 2>/dev/null || { echo "compare.sh: $py cannot import torch (apt-get install python3-torch)" >&2; exit 2; }
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
w=$(mktemp -d /tmp/rt-sparse-bench.XXXXXX)
trap 'rm -rf "$w"' EXIT

"$bin" make-clicklog --format libsvm --rows "$rows" --features "$features" --seed 1 --model-seed 7 \
  --out "$w/train.svm" --truth "$w/truth_train.json" >/dev/null
"$bin" make-clicklog --format libsvm --rows $((rows / 10)) --features "$features" --seed 2 --model-seed 7 \
  --out "$w/test.svm" --truth "$w/truth_test.json" >/dev/null
mb=$(du -m "$w/train.svm" | cut -f1)
echo "data: $rows training rows ($mb MB libsvm), $((rows / 10)) test rows, $features features; batch $batch, AdaGrad lr $lr, one epoch"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), pinned to cpu $cpu"
echo "load average before the rounds: $(cut -d' ' -f1-3 /proc/loadavg)"

rt_args=(train --config "$root/configs/sparse_logreg_libsvm.json" --set data.train_file="$w/train.svm"
  --set data.test_file="$w/test.svm" --set data.num_features="$features" --set data.shuffle_buffer=0
  --set train.batch_size="$batch" --set train.epochs=1 --set train.threads=1 --set optimizer.name=adagrad
  --set optimizer.lr="$lr" --set optimizer.lr_scaling=none --set checkpoint.every_epochs=0
  --set output.progress=none)
peer_args=(--train "$w/train.svm" --test "$w/test.svm" --features "$features" --batch "$batch" --lr "$lr" --threads 1)

"$py" "$root/bench/sparse/pytorch_sparse_logreg.py" "${peer_args[@]}" --json "$w/peer_warm.json" | head -n 40 \
  | grep -E "MKL-DNN|CPU capability|BLAS_INFO|^torch " || true

# The vCPUs of a development VM drift in speed (one has run at half the other's clock for minutes), and a slow vCPU
# slows the Python peer more than ringtrain: each round records both vCPUs' speed (M loop iterations/s of a fixed
# Python loop, pinned), so a ratio can be read next to the speed it was measured at.
vcpu_speed() {
  taskset -c "$1" "$py" -c 'import time
t = time.perf_counter(); i = 0
while i < 2000000: i += 1
print(round(2 / (time.perf_counter() - t), 2))'
}
rows_json="["
for r in $(seq 1 "$rounds"); do
  speed0=$(vcpu_speed 0); speed1=$(vcpu_speed 1)
  taskset -c "$cpu" "$bin" "${rt_args[@]}" --set output.dir="$w/rt$r" >/dev/null 2>"$w/rt$r.log" \
    || { cat "$w/rt$r.log" >&2; exit 1; }
  taskset -c "$cpu" "$py" "$root/bench/sparse/pytorch_sparse_logreg.py" "${peer_args[@]}" --quiet-config \
    --json "$w/peer$r.json" >/dev/null
  line=$("$py" - "$w/rt$r/summary.json" "$w/peer$r.json" "$r" "$speed0" "$speed1" <<'PY'
import json, sys
rt = json.load(open(sys.argv[1])); pe = json.load(open(sys.argv[2])); r = int(sys.argv[3])
speed = {"0": float(sys.argv[4]), "1": float(sys.argv[5])}
row = {"round": r, "ringtrain_samples_per_s": rt["samples_per_s"], "pytorch_samples_per_s": pe["samples_per_s"],
       "ratio": rt["samples_per_s"] / pe["samples_per_s"], "ringtrain_test_logloss": rt["test_logloss"],
       "pytorch_test_logloss": pe["test_logloss"], "ringtrain_test_auc": rt["test_auc"], "pytorch_test_auc": pe["test_auc"],
       "pytorch_parse_s": pe["parse_s"], "load1": float(open("/proc/loadavg").read().split()[0]),
       "vcpu_speed_before": speed}
print(json.dumps(row))
PY
)
  echo "$line"
  rows_json+="$line,"
done

# Weak scaling, one core per rank: the same per-rank batch, each rank its half of the file (mpirun --bind-to core),
# against 1 rank on one core and the ceiling: two independent 1-rank copies at once, each on its own core.
for r in $(seq 1 "$rounds"); do
  speed0=$(vcpu_speed 0); speed1=$(vcpu_speed 1)
  taskset -c 0 "$bin" "${rt_args[@]}" --set output.dir="$w/n1_$r" >/dev/null 2>&1
  mpirun --bind-to core -np 2 "$bin" "${rt_args[@]}" --set sync.sparse=auto \
    --set output.dir="$w/n2_$r" >/dev/null 2>&1
  taskset -c 0 "$bin" "${rt_args[@]}" --set output.dir="$w/c1_$r" >/dev/null 2>&1 &
  taskset -c 1 "$bin" "${rt_args[@]}" --set output.dir="$w/c2_$r" >/dev/null 2>&1
  wait
  line=$("$py" - "$w" "$r" "$speed0" "$speed1" <<'PY'
import json, sys
w, r = sys.argv[1], sys.argv[2]
speed = {"0": float(sys.argv[3]), "1": float(sys.argv[4])}
s = lambda d: json.load(open(f"{w}/{d}_{r}/summary.json"))
n1, n2, c1, c2 = s("n1"), s("n2"), s("c1"), s("c2")
ceiling = c1["samples_per_s"] + c2["samples_per_s"]
print(json.dumps({"round": int(r), "n1_samples_per_s": n1["samples_per_s"], "n2_samples_per_s": n2["samples_per_s"],
                  "weak_scaling": n2["samples_per_s"] / (2 * n1["samples_per_s"]),
                  "ceiling_samples_per_s": ceiling, "of_ceiling": n2["samples_per_s"] / ceiling,
                  "allgather_steps": n2["sync"]["allgather_steps"], "dense_steps": n2["sync"]["dense_steps"],
                  "bytes_per_step_per_rank": n2["sync"]["bytes_allgather"] / max(1, n2["steps"]),
                  "load1": float(open("/proc/loadavg").read().split()[0]), "vcpu_speed_before": speed}))
PY
)
  echo "$line"
  rows_json+="$line,"
done
rows_json="${rows_json%,}]"
[ -n "$json_out" ] && echo "$rows_json" > "$json_out"
exit 0
