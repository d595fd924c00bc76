#!/usr/bin/env bash
# Single-GPU training throughput of ringtrain against PyTorch eager on the same card, in one run:
# LeNet-5 (Adam) and the MNIST CNN (Adadelta) at batch 128 and 1024, through the real trainer (IDX data from
# DATA_DIR, batches copied to the GPU each step). Needs a CUDA build in $BUILD (default build-gpu).
# Usage: bench/gpu/gpu_bench.sh [DATA_DIR]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${BUILD:-$root/build-gpu}"
data="${1:-/usr/share/datasets/fashion-mnist}"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data_sets=(--set data.dir="$data")
if [ ! -e "$data/train-images-idx3-ubyte.gz" ] && [ ! -e "$data/train-images-idx3-ubyte" ]; then
  # A machine without the data set (a device machine has no network): synthetic data of the same shape.
  echo "gpu_bench.sh: no Fashion-MNIST IDX files in $data: synthetic 1x28x28 data, 60000 + 10000 samples" >&2
  data_sets=(--set data.format=synthetic --set data.synthetic_train_size=60000 --set data.synthetic_test_size=10000)
fi
for cfg in lenet5_fashion mnist_cnn_fashion; do
  for batch in 128 1024; do
    out="/tmp/ringtrain-gpu-$cfg-$batch"
    rm -rf "$out"  # a benchmark run, not a run to continue: a fresh run refuses an earlier run's folder
    steps=$(( batch == 128 ? 2000 : 400 ))
    "$build/ringtrain" train --config "$root/configs/$cfg.json" --set device=cuda "${data_sets[@]}" \
      --set train.batch_size=$batch --set train.max_steps=$steps --set train.epochs=100 --set train.log_every_steps=20 \
      --set checkpoint.every_epochs=0 --set output.progress=none --set output.dir="$out" > "$out.log" 2>&1 \
      || { echo "ringtrain $cfg batch $batch failed:"; tail -5 "$out.log"; continue; }
    python3 - "$out" "$cfg" "$batch" <<'PY'
import json, statistics, sys
d, cfg, b = sys.argv[1:4]
s = json.load(open(d + "/summary.json"))
w = [r["samples_per_s"] for r in map(json.loads, open(d + "/metrics.jsonl")) if r["type"] == "step"]
u = s.get("gpu_utilisation", {})
print(json.dumps({"impl": "ringtrain", "model": cfg.split("_")[0] if cfg.startswith("lenet") else "mnist_cnn",
                  "batch": int(b), "samples_per_s": statistics.median(w[1:]), "test_accuracy": s["test_accuracy"],
                  "device": s.get("device_name"), "phase_s": s["phase_s"],
                  "gpu_percent": u.get("mean_gpu_percent"), "gpu_utilisation": u, "gpu_memory": s.get("gpu_memory")}))
PY
  done
done
# AlexNet on synthetic 3x224x224 data (compute-bound; the batch is assembled and copied on the host each step).
out=/tmp/ringtrain-gpu-alexnet
rm -rf "$out"
"$build/ringtrain" train --config "$root/configs/alexnet_synthetic.json" --set device=cuda --set train.max_steps=96 \
  --set train.epochs=100 --set output.progress=none --set output.dir="$out" > "$out.log" 2>&1 \
  || { echo "ringtrain alexnet failed:"; tail -5 "$out.log"; }
[ -s "$out/summary.json" ] && python3 - "$out" <<'PY'
import json, statistics, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
w = [r["samples_per_s"] for r in map(json.loads, open(d + "/metrics.jsonl")) if r["type"] == "step"]
u = s.get("gpu_utilisation", {})
print(json.dumps({"impl": "ringtrain", "model": "alexnet", "batch": s["batch_size_per_rank"],
                  "samples_per_s": statistics.median(w[1:]), "device": s.get("device_name"), "phase_s": s["phase_s"],
                  "gpu_percent": u.get("mean_gpu_percent"), "gpu_utilisation": u, "gpu_memory": s.get("gpu_memory")}))
PY
python3 "$root/bench/gpu/pytorch_reference.py" --steps 100 || echo "PyTorch reference failed (is torch installed?)"
