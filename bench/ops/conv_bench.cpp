// bench_conv: single-thread CPU GEMM and convolution throughput (median of 5 runs after a warm-up).
//   bench_conv [--threads N] [--columns C] [--sweep] [--cpu-time]
// --columns sets the minimum GEMM width used to group samples in conv (1 = one GEMM per sample);
// --sweep times the conv layers for several settings.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "ops/cpu/cpu_ops.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/ops/ops.hpp"
#include "ringtrain/ops/threads.hpp"

using namespace ringtrain;

namespace {

bool g_cpu_clock = false;  // --cpu-time: time with this thread's CPU clock (robust on a loaded single-thread box)

double now_ms() {
    if (g_cpu_clock) {
        timespec ts{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median_ms(const std::function<void()>& f, int reps = 5) {
    f();  // warm-up (also grows workspaces)
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        const double a = now_ms();
        f();
        t.push_back(now_ms() - a);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

Tensor rnd(Shape s, Rng& rng) {
    Tensor t(std::move(s));
    for (float& v : t.span()) v = rng.uniform(-1.0f, 1.0f);
    return t;
}

double gemm_gflops(int64_t m, int64_t n, int64_t k, Rng& rng, int reps_inner = 1) {
    const Tensor a = rnd({m, k}, rng), b = rnd({k, n}, rng);
    Tensor c({m, n});
    const double ms = median_ms([&] {
        for (int i = 0; i < reps_inner; ++i) ops::gemm(a, false, b, false, c);
    });
    const double gf = 2.0 * m * n * k * reps_inner / (ms * 1e6);
    std::printf("gemm %5lldx%6lldx%4lld (x%d)  %9.2f ms  %7.1f GFLOP/s\n", (long long)m, (long long)n, (long long)k,
                reps_inner, ms, gf);
    return gf;
}

struct Layer {
    const char* name;
    int64_t N, C, H, W, K, R, S, pad;
};

void conv_layer(const Layer& l, double gemm_rate, Rng& rng) {
    const ops::Conv2dParams p{1, 1, l.pad, l.pad};
    const Tensor x = rnd({l.N, l.C, l.H, l.W}, rng), w = rnd({l.K, l.C, l.R, l.S}, rng), b = rnd({l.K}, rng);
    const Shape ys = ops::conv2d_output_shape(x.shape(), w.shape(), p);
    Tensor y(ys), dx(x.shape()), dw(w.shape()), db({l.K});
    const Tensor dy = rnd(ys, rng);
    ops::Workspace ws;
    const double flops = 2.0 * l.N * l.K * l.C * l.R * l.S * ys[2] * ys[3];
    const double f = median_ms([&] { ops::conv2d_forward(x, w, b, y, p, ws); });
    const double bd = median_ms([&] { ops::conv2d_backward_data(dy, w, dx, p, ws); });
    const double bf = median_ms([&] { ops::conv2d_backward_filter(x, dy, dw, db, p, ws); });
    auto row = [&](const char* what, double ms, double fl) {
        const double gf = fl / (ms * 1e6);
        std::printf("  %-14s %-10s %8.2f ms  %7.1f GFLOP/s  %5.0f%% of GEMM\n", l.name, what, ms, gf,
                    100.0 * gf / gemm_rate);
    };
    row("forward", f, flops);
    row("bwd-data", bd, flops);
    row("bwd-filter", bf, flops);
    row("fwd+bwd", f + bd + bf, 3 * flops);
    row("fwd+bwd-filt", f + bf, 2 * flops);
}

}  // namespace

int main(int argc, char** argv) {
    int threads = 1;
    int64_t columns = 0;
    bool sweep = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--columns") && i + 1 < argc) columns = std::atoll(argv[++i]);
        else if (!std::strcmp(argv[i], "--sweep")) sweep = true;
        else if (!std::strcmp(argv[i], "--cpu-time")) g_cpu_clock = true;
        else {
            std::fprintf(stderr, "usage: bench_conv [--threads N] [--columns C] [--sweep] [--cpu-time]\n");
            return 2;
        }
    }
    ops::set_intra_op_threads(threads);
    ops::cpu::set_conv_min_gemm_columns(columns);
    Rng rng(1);
    std::printf("threads %d, conv min GEMM columns %lld, %s time, median of 5\n", threads,
                (long long)ops::cpu::conv_min_gemm_columns(), g_cpu_clock ? "thread CPU" : "wall");
    const double big = gemm_gflops(64, 576 * 128, 288, rng);  // MNIST conv2 forward as one batch-wide GEMM
    gemm_gflops(64, 576, 288, rng, 128);                        // ... as 128 per-sample GEMMs
    gemm_gflops(1024, 1024, 1024, rng);
    const Layer layers[] = {
        {"mnist-conv1", 128, 1, 28, 28, 32, 3, 3, 0},
        {"mnist-conv2", 128, 32, 26, 26, 64, 3, 3, 0},
        {"lenet-conv1", 64, 1, 28, 28, 6, 5, 5, 2},
        {"lenet-conv2", 64, 6, 14, 14, 16, 5, 5, 0},
    };
    std::vector<int64_t> settings = {columns};
    if (sweep) settings = {1, 1024, 4096, 16384, 1 << 30};
    for (int64_t c : settings) {
        ops::cpu::set_conv_min_gemm_columns(c);
        std::printf("conv (columns %lld), %% relative to the batch-wide GEMM rate %.1f GFLOP/s\n",
                    (long long)ops::cpu::conv_min_gemm_columns(), big);
        for (const Layer& l : layers) conv_layer(l, big, rng);
    }
    return 0;
}
