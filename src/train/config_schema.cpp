#include "config_schema.hpp"

#include "ringtrain/core/error.hpp"
#include "ringtrain/train/run_plan.hpp"
#include "ringtrain/train/stop_request.hpp"

namespace ringtrain::train::detail {

using nlohmann::json;

namespace {

// The keys outside the sections: the model file and the device.
KeyRows top_level_keys() {
    return {
        {"model", {.kind = Kind::String, .nonempty = true, .doc = "architecture file (models/*.json)"}},
        {"device", {.kind = Kind::String, .fallback = "auto", .choices = spellings<DeviceChoice>(),
          .doc = "where each rank computes"}},
    };
}

// data: the readers (IDX, CIFAR-10, synthetic, libsvm/criteo) and the input pipeline.
KeyRows data_keys() {
    return {
        {"data.format", {.kind = Kind::String, .fallback = "idx", .choices = spellings<DataFormat>(),
          .doc = "data set reader"}},
        {"data.dir", {.kind = Kind::String, .fallback = "/usr/share/datasets/fashion-mnist", .nonempty = true,
          .doc = "idx: folder with the four IDX files (train-images-idx3-ubyte[.gz] ...); cifar10: folder with "
                 "data_batch_1..5.bin and test_batch.bin (the binary version)"}},
        {"data.mean", {.kind = Kind::NumberOrArray, .fallback = 0.0,
          .doc = "subtracted after scaling pixels to [0,1]: a number, or one per channel (image_folder: data.channels; "
                 "cifar10: 3)"}},
        {"data.std", {.kind = Kind::NumberOrArray, .fallback = 1.0, .min = 1e-12,
          .doc = "divides after subtracting the mean: a number, or one per channel (image_folder, cifar10)"}},
        {"data.prefetch", {.kind = Kind::Bool, .fallback = true,
          .doc = "dense models: fill the next batch on a background thread where it can pay (on the CPU: more usable CPUs than "
                  "train.threads), until 32 batches show that it hides under a quarter of the filling"}},
        {"data.workers", {.kind = Kind::Int, .fallback = 1, .min = 1, .max = 64,
          .doc = "dense models: threads that fill each batch together (DataLoader's num_workers): image_folder decodes on this "
                  "many threads; other formats split only batches of 1 M floats or more"}},
        {"data.synthetic_train_size", {.kind = Kind::Int, .fallback = 8192, .min = 1,
          .doc = "synthetic: training samples"}},
        {"data.synthetic_test_size", {.kind = Kind::Int, .fallback = 2048, .min = 1, .max = 2147483647,
          .doc = "synthetic: test samples"}},
        {"data.synthetic_shape", {.kind = Kind::IntArray, .fallback = json::array({1, 28, 28}), .min = 1,
          .doc = "synthetic: sample shape"}},
        {"data.synthetic_classes", {.kind = Kind::Int, .fallback = 10, .min = 2,
          .doc = "synthetic: number of classes"}},
        {"data.train_file", {.kind = Kind::String, .fallback = "",
          .doc = "libsvm/criteo: training file (plain or .gz), read streaming, each rank its share of the lines"}},
        {"data.test_file", {.kind = Kind::String, .fallback = "",
          .doc = "libsvm/criteo: test file (plain or .gz)"}},
        {"data.index_base", {.kind = Kind::Int, .fallback = 1, .min = 0, .max = 1,
          .doc = "libsvm: the first feature index (1 as libsvm, or 0)"}},
        {"data.num_features", {.kind = Kind::Int, .fallback = 0, .min = 0, .max = int64_t{1} << 32,
          .doc = "libsvm: feature count (0 = the largest index in the training file, rounded up)"}},
        {"data.hash_bits", {.kind = Kind::Int, .fallback = 20, .min = 1, .max = 30,
          .doc = "criteo: (column, value) pairs hash into 2^hash_bits features"}},
        {"data.criteo_integers", {.kind = Kind::String, .fallback = "log2",
          .choices = spellings<CriteoIntegerTransform>(),
          .doc = "criteo: integer columns bucketed as floor(ln(x)^2) (log2: the Criteo winners' transform, natural log squared, not log base 2) or hashed as they are (hash)"}},
        {"data.shuffle_buffer", {.kind = Kind::Int, .fallback = 0, .min = 0, .max = int64_t{1} << 26,
          .doc = "libsvm/criteo: rows shuffled in memory (0 = file order)"}},
        {"data.cache", {.kind = Kind::Bool, .fallback = false,
          .doc = "libsvm/criteo: keep each rank's parsed share in memory after the first epoch (small files); "
                  "image_folder: keep decoded, resized 8-bit images in memory (its size is reported)"}},
        {"data.train_dir", {.kind = Kind::String, .fallback = "",
          .doc = "image_folder: the training images, one sub-folder per class (classes = sorted folder names)"}},
        {"data.test_dir", {.kind = Kind::String, .fallback = "",
          .doc = "image_folder: the test images, sub-folders named as the training classes"}},
        {"data.image_size", {.kind = Kind::IntArray, .fallback = json::array({0, 0}), .min = 0, .max = 16384,
          .length = 2, .doc = "image_folder: [height, width] every image is resized to (the model's input); cifar10: [32, 32] "
                 "only"}},
        {"data.channels", {.kind = Kind::Int, .fallback = 3, .min = 1, .max = 3,
          .doc = "image_folder: 3 (RGB; grey files are replicated) or 1 (grey; colour files are converted); cifar10: "
                 "3 only"}},
        {"data.augment.random_crop_padding", {.kind = Kind::Int, .fallback = 0, .min = 0, .max = 4096,
          .doc = "image_folder and cifar10, training: pad by this many zero pixels on every side, crop back at a "
                  "random place"}},
        {"data.augment.hflip", {.kind = Kind::Bool, .fallback = false,
          .doc = "image_folder and cifar10, training: mirror left-right with probability 1/2"}},
        {"data.augment.random_resized_crop", {.kind = Kind::NumberArray, .fallback = json::array({0.0, 0.0}),
          .min = 0.0, .max = 1.0, .length = 2,
          .doc = "image_folder and cifar10, training: [min_scale, max_scale] of torchvision's RandomResizedCrop (area "
                  "fraction, aspect 3/4..4/3); [0, 0] = off"}},
        {"data.skip_bad_files", {.kind = Kind::Bool, .fallback = false,
          .doc = "image_folder: false = a corrupt or unreadable image stops the run (exit 2, naming it); true = "
                  "the ranks check every file at start-up and all skip the same bad ones (counted, reported once)"}},
    };
}

// train: batch, length, threads, logging and the graceful stop.
KeyRows train_keys() {
    return {
        {"train.batch_size", {.kind = Kind::Int, .fallback = 64, .min = 1, .max = 1 << 20,
          .doc = "samples per rank per step (global = N x this)"}},
        {"train.epochs", {.kind = Kind::Int, .fallback = 1, .min = 1, .max = 100000,
          .doc = "passes over the training set"}},
        {"train.seed", {.kind = Kind::Int, .fallback = 42, .min = 0,
          .doc = "seed for initialisation, shuffling and dropout"}},
        {"train.threads", {.kind = Kind::Int, .fallback = 1, .min = 1, .max = 1024,
          .doc = "dense models: intra-op CPU threads per rank"}},
        {"train.cpu_conv", {.kind = Kind::String, .fallback = "auto", .choices = spellings<ops::CpuConv>(),
          .doc = "dense models on the CPU: convolutions (and on AVX-512 the linear layers' products): onednn, im2col (with OpenBLAS), or "
                 "auto (what measured faster on this CPU; `ringtrain info`)"}},
        {"train.cpu_precision", {.kind = Kind::String, .fallback = "fp32", .choices = spellings<ops::CpuPrecision>(),
          .doc = "bf16: CPU convolutions (6+ input channels) and linear layers (products 32+ wide) read bf16 and "
                 "accumulate in fp32, like torch.autocast; needs AVX512-BF16 or AMX"}},
        {"train.max_steps", {.kind = Kind::Int, .fallback = 0, .min = 0,
          .doc = "stop after this many steps in all (0 = no cap)"}},
        {"train.eval_batch_size", {.kind = Kind::Int, .fallback = 1000, .min = 1, .max = 1 << 20,
          .doc = "batch size for evaluation"}},
        {"train.log_every_steps", {.kind = Kind::Int, .fallback = 50, .min = 1,
          .doc = "steps between metrics lines and progress lines"}},
        {"train.profile_layers", {.kind = Kind::Bool, .fallback = false,
          .doc = "dense models: time each layer (adds per-layer times to the summary)"}},
        {"train.stop_signal", {.kind = Kind::String, .fallback = "SIGUSR1", .choices = stop_signal_spellings(),
          .doc = "besides SIGTERM and SIGINT, this signal stops the run at the next step with a checkpoint (exit 3; "
                  "pair with sbatch --signal=B:USR1@120); none = only those two"}},
        {"train.stop_grace_s", {.kind = Kind::Number, .fallback = 60.0, .min = 0.0, .max = 1e6,
          .doc = "after a stop signal, end at once (exit 4, no checkpoint) if the ranks have not agreed to stop "
                  "within this many seconds (0 = wait for ever)"}},
    };
}

// optimizer: the update rule, its hyper-parameters and the learning-rate schedule.
KeyRows optimizer_keys() {
    return {
        {"optimizer.name", {.kind = Kind::String, .fallback = "sgd", .choices = spellings<OptimizerName>(),
          .doc = "update rule"}},
        {"optimizer.lr", {.kind = Kind::Number, .fallback = 0.01, .min = 1e-12, .max = 1e6,
          .doc = "single-rank learning rate (scaled by lr_scaling)"}},
        {"optimizer.lr_scaling", {.kind = Kind::String, .fallback = "linear", .choices = spellings<LrScaling>(),
          .doc = "world-size rule: lr x N, lr x sqrt(N) or lr"}},
        {"optimizer.momentum", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 0.999999,
          .doc = "dense SGD: momentum"}},
        {"optimizer.nesterov", {.kind = Kind::Bool, .fallback = false, .doc = "dense SGD: Nesterov momentum"}},
        {"optimizer.weight_decay", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 1.0,
          .doc = "dense models: L2 penalty added to the gradient"}},
        {"optimizer.beta1", {.kind = Kind::Number, .fallback = 0.9, .min = 0.0, .max = 0.999999, .doc = "Adam (dense models)"}},
        {"optimizer.beta2", {.kind = Kind::Number, .fallback = 0.999, .min = 0.0, .max = 0.999999999, .doc = "Adam (dense models)"}},
        {"optimizer.eps", {.kind = Kind::Number, .min = 1e-20, .max = 1.0, .nullable = true,
          .doc = "Adam (default 1e-8) / Adadelta (default 1e-6) / AdaGrad (default 1e-10)"}},
        {"optimizer.rho", {.kind = Kind::Number, .fallback = 0.9, .min = 0.0, .max = 0.999999,
          .doc = "Adadelta (dense models): decay"}},
        {"optimizer.l1", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 1e6,
          .doc = "ftrl: L1 strength (weights with |z| <= l1 are exactly 0)"}},
        {"optimizer.l2", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 1e6, .doc = "ftrl: L2 strength"}},
        {"optimizer.beta", {.kind = Kind::Number, .fallback = 1.0, .min = 0.0, .max = 1e6,
          .doc = "ftrl: beta of the per-coordinate rate alpha / (beta + sqrt(n)); alpha is optimizer.lr"}},
        {"optimizer.initial_accumulator", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 1e6,
          .doc = "adagrad: starting value of each squared-gradient sum (0 as PyTorch; TensorFlow uses 0.1)"}},
        {"optimizer.schedule", {.kind = Kind::String, .fallback = "constant", .choices = spellings<Schedule>(),
          .doc = "decay after warmup"}},
        {"optimizer.step_epochs", {.kind = Kind::Number, .fallback = 30.0, .min = 1e-9, .max = 1e6,
          .doc = "step schedule: epochs between decays"}},
        {"optimizer.gamma", {.kind = Kind::Number, .fallback = 0.1, .min = 0.0, .max = 1.0,
          .doc = "step schedule: decay factor"}},
        {"optimizer.min_lr_factor", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 1.0,
          .doc = "cosine: final lr as a fraction of the peak"}},
        {"optimizer.warmup_epochs", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 1e6,
          .doc = "dense models: linear warmup length (Goyal et al.)"}},
        {"optimizer.warmup_start_lr", {.kind = Kind::Number, .min = 0.0, .max = 1e6, .nullable = true,
          .doc = "with warmup_epochs > 0: warmup start (default: the unscaled lr)"}},
    };
}

// sync: how the ranks combine gradients (backend, buckets, overlap, compression, local SGD, stalls).
KeyRows sync_keys() {
    return {
        {"sync.backend", {.kind = Kind::String, .fallback = "ring", .choices = spellings<Backend>(),
          .doc = "allreduce implementation"}},
        {"sync.fusion_bytes", {.kind = Kind::Int, .fallback = int64_t{64} << 20, .min = 0,
          .doc = "dense models: gradients (local SGD: parameters) are packed into buffers up to this size, one allreduce each (0 = one per tensor)"}},
        {"sync.cycle_time_ms", {.kind = Kind::Number, .fallback = 1.0, .min = 0.0, .max = 10000.0,
          .doc = "with overlap: gradients ready more than this apart (timed in the first step) "
                  "go in separate buckets (0 = by size only)"}},
        {"sync.min_bucket_bytes", {.kind = Kind::Int, .fallback = int64_t{1} << 20, .min = 0,
          .doc = "with cycle_time_ms: a time gap closes a bucket only once it holds this many bytes"}},
        {"sync.overlap", {.kind = Kind::Bool, .fallback = true,
          .doc = "dense models, sync.mode allreduce: allreduce finished buckets on a communication thread while backward goes on"}},
        {"sync.compression", {.kind = Kind::String, .fallback = "none", .choices = spellings<Compression>(),
          .doc = "dense models, sync.mode allreduce: 16-bit gradients on the wire (sums still formed in fp32)"}},
        {"sync.backward_passes_per_step", {.kind = Kind::Int, .fallback = 1, .min = 1, .max = 1 << 16,
          .doc = "dense models: gradient accumulation, k local backward passes per allreduce and update"}},
        {"sync.mode", {.kind = Kind::String, .fallback = "allreduce", .choices = spellings<SyncMode>(),
          .doc = "allreduce: average gradients every step; local_sgd: step locally, "
                  "average parameters every local_sgd_period steps"}},
        {"sync.local_sgd_period", {.kind = Kind::Int, .fallback = 8, .min = 1,
          .doc = "local_sgd: steps between parameter averaging"}},
        {"sync.stall_warning_s", {.kind = Kind::Number, .fallback = 60.0, .min = 0.0, .max = 1e7,
          .doc = "warn (on every waiting rank) when a collective has not finished after this long (0 = never)"}},
        {"sync.stall_abort_s", {.kind = Kind::Number, .fallback = 600.0, .min = 0.0, .max = 1e7,
          .doc = "abort the job when a collective is stuck this long (0 = never)"}},
        {"sync.setup_timeout_s", {.kind = Kind::Number, .fallback = 300.0, .min = 0.0, .max = 1e7,
          .doc = "abort the job when set-up (data, model, the ranks' agreement, reading the checkpoint to resume from) "
                 "takes longer (0 = never)"}},
        {"sync.batchnorm", {.kind = Kind::Bool, .fallback = false,
          .doc = "synchronised BatchNorm: batch statistics over every rank's batch (two allreduces per batchnorm "
                  "layer in forward, one in backward), as torch.nn.SyncBatchNorm; CPU only, sync.mode allreduce"}},
        {"sync.balance", {.kind = Kind::String, .fallback = "off", .choices = spellings<Balance>(),
          .doc = "speed: split each step's global batch among the ranks in proportion to their measured speed, so "
                  "nobody waits for a slower core (same samples, same mean gradient); dense models on CPU ranks, "
                  "sync.mode allreduce"}},
        {"sync.sparse", {.kind = Kind::String, .fallback = "auto", .choices = spellings<SparseSync>(),
          .doc = "libsvm/criteo: combine gradient rows by allgather, by a dense allreduce, or per step by "
                  "whichever moves fewer bytes (auto)"}},
        {"sync.sparse_update", {.kind = Kind::String, .fallback = "owner", .choices = spellings<SparseUpdate>(),
          .doc = "libsvm/criteo, sync.mode allreduce: owner = each rank merges and updates only its own range of "
                  "rows and then shares them with their optimizer state (less work per rank); replicated = every "
                  "rank merges and updates every row. Same parameters either way"}},
    };
}

// checkpoint: when to write, how many to keep, where to resume from.
KeyRows checkpoint_keys() {
    return {
        {"checkpoint.every_epochs", {.kind = Kind::Int, .fallback = 1, .min = 0,
          .doc = "write a checkpoint every k epochs (0 = never)"}},
        {"checkpoint.every_steps", {.kind = Kind::Int, .fallback = 0, .min = 0,
          .doc = "write a checkpoint every k steps (0 = never)"}},
        {"checkpoint.keep", {.kind = Kind::Int, .fallback = 3, .min = 1, .doc = "how many recent checkpoints to keep"}},
        {"checkpoint.resume", {.kind = Kind::String, .fallback = "",
          .doc = "\"\" = fresh start, \"auto\" = latest in output.dir, or a path"}},
    };
}

// output: where rank 0 writes, and the optional timeline, progress and TensorBoard.
KeyRows output_keys() {
    return {
        {"output.dir", {.kind = Kind::String, .fallback = "runs/default", .nonempty = true,
          .doc = "where rank 0 writes summary, metrics, checkpoints"}},
        {"output.timeline", {.kind = Kind::String, .fallback = "",
          .doc = "dense models: write a Chrome trace (chrome://tracing, Perfetto) of every rank's steps to this file"}},
        {"output.progress", {.kind = Kind::String, .fallback = "auto", .choices = spellings<ProgressMode>(),
          .doc = "progress on stderr: live bar on a terminal, lines in a pipe"}},
        {"output.tensorboard", {.kind = Kind::Bool, .fallback = false,
          .doc = "rank 0 writes TensorBoard event files (scalars per logged step and epoch) into output.dir/tensorboard"}},
    
    };
}

}  // namespace

std::map<std::string, KeySpec> schema_of(const std::vector<KeyRows>& sections) {
    std::map<std::string, KeySpec> all;
    for (const KeyRows& rows : sections)
        for (const auto& row : rows)
            if (!all.insert(row).second) throw Error("internal: config key '" + row.first + "' is in the schema twice");
    return all;
}

const std::map<std::string, KeySpec>& schema() {
    static const std::map<std::string, KeySpec> s = schema_of(
        {top_level_keys(), data_keys(), train_keys(), optimizer_keys(), sync_keys(), checkpoint_keys(), output_keys()});
    return s;
}

}  // namespace ringtrain::train::detail
