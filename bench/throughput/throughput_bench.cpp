// Training-step throughput of one model at one batch size, the trainer's own step (forward, loss, backward,
// gradient averaging, optimizer) on in-memory batches, so the number is the engine's and not the disk's.
// Runs under mpirun too: then every rank steps and averages gradients, and the result is the weak-scaling
// throughput (N x batch per step). Reports the median of several timed runs after a warm-up, the per-layer
// split of one step, and the model's FLOP rate against a GEMM measured in the same run.
//
//   bench_throughput --model models/lenet5.json --batch 64 --optimizer adam [--steps 200] [--runs 5] [--json F]
//                    [--momentum 0.9] [--cpu-conv auto|onednn|im2col] [--cpu-precision fp32|bf16]
// The sample shape is the model file's "input" (1x28x28 when it has none); a one-output model gets labels 0/1.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/data/synthetic.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/json_file.hpp"
#include "ringtrain/ops/cpu_conv.hpp"
#include "ringtrain/ops/ops.hpp"
#include "ringtrain/ops/threads.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/sync/consistency.hpp"
#include "ringtrain/sync/gradient_sync.hpp"

using namespace ringtrain;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// This process's CPU time: on a shared machine, samples per CPU second is far less disturbed by other load than
// samples per wall second (the PyTorch reference reports the same, from time.process_time()).
double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double gemm_gflops(int64_t m, int64_t n, int64_t k) {
    Tensor a({m, k}), b({k, n}), c({m, n});
    a.fill(0.5f);
    b.fill(0.25f);
    ops::gemm(a, false, b, false, c);
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
        const auto t0 = Clock::now();
        ops::gemm(a, false, b, false, c);
        best = std::min(best, seconds(t0, Clock::now()));
    }
    return 2.0 * m * n * k / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
    ops::restart_with_openblas_kernels_for_this_cpu(argv);  // as ringtrain's main does: the trainer's own kernels
    comm::MpiRuntime mpi(&argc, &argv);
    std::string model_path = "models/lenet5.json", optimizer = "sgd", json_out, backend = "ring", cpu_conv = "auto";
    std::string cpu_precision = "fp32";
    int64_t batch = 64, steps = 200, warmup = 20, runs = 5, threads = 1;
    float momentum = 0.0f;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--model") model_path = next();
        else if (a == "--batch") batch = std::stoll(next());
        else if (a == "--optimizer") optimizer = next();
        else if (a == "--steps") steps = std::stoll(next());
        else if (a == "--warmup") warmup = std::stoll(next());
        else if (a == "--runs") runs = std::stoll(next());
        else if (a == "--threads") threads = std::stoll(next());
        else if (a == "--backend") backend = next();
        else if (a == "--json") json_out = next();
        else if (a == "--momentum") momentum = std::stof(next());
        else if (a == "--cpu-conv") cpu_conv = next();
        else if (a == "--cpu-precision") cpu_precision = next();
        else {
            std::fprintf(stderr, "unknown argument %s\nusage: bench_throughput --model F --batch B --optimizer "
                                 "sgd|adam|adadelta [--steps N] [--warmup N] [--runs N] [--threads N] "
                                 "[--backend ring|mpi] [--momentum M] [--cpu-conv auto|onednn|im2col] [--cpu-precision fp32|bf16] "
                                 "[--json FILE]\n", a.c_str());
            return 2;
        }
    }
    try {
        ops::set_intra_op_threads(static_cast<int>(threads));
        if (cpu_conv == "onednn") ops::set_cpu_conv(ops::CpuConv::OneDnn);
        else if (cpu_conv == "im2col") ops::set_cpu_conv(ops::CpuConv::Im2col);
        else if (cpu_conv != "auto") throw InputError("--cpu-conv must be auto, onednn or im2col, got " + cpu_conv);
        if (cpu_precision != "fp32" && cpu_precision != "bf16")
            throw InputError("--cpu-precision must be fp32 or bf16, got " + cpu_precision);
        ops::set_cpu_precision(cpu_precision == "bf16" ? ops::CpuPrecision::Bf16 : ops::CpuPrecision::Fp32);
        auto comm = comm::make_communicator(backend);
        const int rank = comm->rank(), world = comm->size();
        Rng rng(42);
        Shape sample{1, 28, 28};
        const nlohmann::json arch = read_json_file(model_path, "model file", "pass --model with an existing models/*.json");
        if (arch.contains("input")) sample = arch["input"].get<Shape>();
        nn::Model model = nn::Model::from_file(model_path, sample, rng);
        const int64_t classes = model.output_shape().back() == 1 ? 2 : model.output_shape().back();
        optim::OptimizerOptions oo;
        oo.name = optimizer;
        oo.momentum = momentum;
        if (optimizer == "adadelta") {
            oo.rho = 0.95f;
            oo.eps = 1e-7f;
        }
        auto opt = optim::make_optimizer(oo, model.parameters());
        sync::broadcast_from_root(*comm, model.parameters(), opt->state());
        // Every gradient in one bucket, reduced on this thread after backward (on a communicator of its own).
        sync::SyncOptions so;
        so.fusion_bytes = std::numeric_limits<size_t>::max();
        so.overlap = false;
        sync::GradientSync gsync(comm::make_communicator(backend), model.parameters(), so);

        // A few distinct in-memory batches, cycled, so caches see changing data as in training.
        data::SyntheticDataset ds(sample, classes, batch * 4, 1 + rank);
        std::vector<Tensor> xs, ys;
        for (int b = 0; b < 4; ++b) {
            Shape xs_shape{batch};
            xs_shape.insert(xs_shape.end(), sample.begin(), sample.end());
            Tensor x(xs_shape), y({batch});
            const int64_t per = shape_numel(sample);
            for (int64_t i = 0; i < batch; ++i) y.data()[i] = ds.read(b * batch + i, x.data() + i * per);
            xs.push_back(x);
            ys.push_back(y);
        }
        const float lr = optimizer == "adadelta" ? 1.0f : (optimizer == "adam" ? 1e-3f : 0.01f);
        Rng drop(7 + rank);
        Tensor dlogits;
        int64_t it = 0;
        auto step = [&]() {
            const Tensor& x = xs[it % 4];
            const Tensor& y = ys[it % 4];
            ++it;
            const Tensor& logits = model.forward(x, {true, &drop});
            model.loss().forward(logits, y);
            model.loss().backward(y, 1.0f / batch, dlogits);
            model.backward(dlogits);
            gsync.synchronize();
            opt->step(lr);
        };
        for (int64_t i = 0; i < warmup; ++i) step();
        std::vector<double> rates, cpu_rates;
        for (int64_t r = 0; r < runs; ++r) {
            comm->barrier();
            const auto t0 = Clock::now();
            const double c0 = cpu_seconds();
            for (int64_t i = 0; i < steps; ++i) step();
            double t = seconds(t0, Clock::now());
            cpu_rates.push_back(static_cast<double>(steps * batch) / (cpu_seconds() - c0));
            comm->allreduce(std::span<double>(&t, 1), comm::ReduceOp::Max);
            rates.push_back(static_cast<double>(steps * batch * world) / t);
        }
        std::sort(rates.begin(), rates.end());
        std::sort(cpu_rates.begin(), cpu_rates.end());
        const double median = rates[rates.size() / 2];
        const double cpu_median = cpu_rates[cpu_rates.size() / 2];

        // Per-layer split of one step.
        model.set_profile(true);
        for (int i = 0; i < 5; ++i) step();
        nlohmann::json layers = nlohmann::json::array();
        double layer_total = 0;
        for (const auto& lt : model.layer_timings()) {
            layers.push_back({{"layer", lt.name}, {"forward_ms", lt.forward_s * 1e3}, {"backward_ms", lt.backward_s * 1e3}});
            layer_total += lt.forward_s + lt.backward_s;
        }
        // Backward costs about twice the forward (gradients for both inputs and weights).
        const double step_flops = 3.0 * model.forward_flops_per_sample();
        const double model_gflops = step_flops * median / world / 1e9;  // per rank
        const double gemm = gemm_gflops(64, 576 * 16, 288);
        if (rank == 0) {
            std::printf("model %s  batch %lld/rank  ranks %d  optimizer %s  threads %lld  cpu conv %s  precision %s\n",
                        model.name().c_str(), static_cast<long long>(batch), world, optimizer.c_str(),
                        static_cast<long long>(threads), ops::cpu_conv_description().c_str(),
                        ops::cpu_precision_description().c_str());
            std::printf("samples/s (median of %lld runs of %lld steps): %.0f   [min %.0f, max %.0f]\n",
                        static_cast<long long>(runs), static_cast<long long>(steps), median, rates.front(), rates.back());
            std::printf("samples per CPU second of rank 0 (median): %.0f   [min %.0f, max %.0f]\n", cpu_median,
                        cpu_rates.front(), cpu_rates.back());
            std::printf("per-layer time of one step (ms):\n");
            for (const auto& l : layers)
                std::printf("  %-10s fwd %8.3f  bwd %8.3f\n", l["layer"].get<std::string>().c_str(),
                            l["forward_ms"].get<double>(), l["backward_ms"].get<double>());
            std::printf("  layers total %.3f ms; step at median rate %.3f ms\n", layer_total * 1e3,
                        batch * world / median * 1e3);
            std::printf("model: %.2f MFLOP/sample (fwd+bwd), %.1f GFLOP/s per rank = %.0f%% of SGEMM 64x9216x288 "
                        "(%.1f GFLOP/s, same run)\n", step_flops / 1e6, model_gflops, 100.0 * model_gflops / gemm, gemm);
        }
        if (rank == 0 && !json_out.empty()) {
            nlohmann::json row = {{"model", model.name()}, {"batch", batch}, {"ranks", world}, {"optimizer", optimizer},
                                  {"threads", threads}, {"cpu_conv", ops::cpu_conv_description()},
                                  {"cpu_precision", cpu_precision}, {"samples_per_s", median}, {"samples_per_s_runs", rates},
                                  {"samples_per_cpu_s", cpu_median}, {"samples_per_cpu_s_runs", cpu_rates},
                                  {"layers", layers}, {"gemm_gflops", gemm}, {"backend", backend},
                                  {"mflop_per_sample", step_flops / 1e6}, {"model_gflops_per_rank", model_gflops}};
            std::ofstream(json_out) << nlohmann::json::array({row}).dump(2) << "\n";
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_throughput: %s\n", e.what());
        return 1;
    }
    return 0;
}
