// Every convolution of LeNet-5, the MNIST CNN and the quality CNN at its training batch, each direction timed on
// both CPU paths (im2col + GEMM, oneDNN), and on oneDNN in bf16 where the CPU has it: the measurements behind
// train.cpu_conv's auto rule and train.cpu_precision's channel threshold (src/ops/cpu_conv.cpp).
// Times are this process's CPU time (best of 6 calls), so other load on a shared machine disturbs them little.
//
//   taskset -c 1 bench_conv_paths        (OPENBLAS_NUM_THREADS=1; one intra-op thread)
#include <algorithm>
#include <cstdio>
#include <ctime>

#include "ringtrain/ops/cpu_conv.hpp"
#include "ringtrain/ops/ops.hpp"
#include "ringtrain/ops/threads.hpp"

using namespace ringtrain;

namespace {

double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct ConvShape {
    const char* name;
    int64_t N, C, H, W, K, R, pad;
    bool bias;
};

}  // namespace

int main() {
    if (!ops::onednn_available()) {
        std::printf("this build has no oneDNN (libdnnl-dev): nothing to compare\n");
        return 0;
    }
    ops::set_intra_op_threads(1);
    const ConvShape shapes[] = {
        {"lenet5.conv1", 64, 1, 28, 28, 6, 5, 2, true},       {"lenet5.conv2", 64, 6, 14, 14, 16, 5, 0, true},
        {"mnist_cnn.conv1", 128, 1, 28, 28, 32, 3, 0, true},  {"mnist_cnn.conv2", 128, 32, 26, 26, 64, 3, 0, true},
        {"quality.conv1", 256, 3, 64, 64, 16, 3, 1, false},   {"quality.conv2", 256, 16, 32, 32, 32, 3, 1, false},
        {"quality.conv3", 256, 32, 16, 16, 64, 3, 1, false}};
    const bool bf16 = ops::bf16_unavailable_reason().empty();
    std::printf("%s\nms of CPU time, best of 6: im2col / oneDNN (ratio > 1: oneDNN faster)%s\n",
                ops::cpu_conv_description().c_str(),
                bf16 ? "; then oneDNN bf16 (every channel count) and float32 / bf16" : "");
    for (const auto& s : shapes) {
        const ops::Conv2dParams p{1, 1, s.pad, s.pad};
        Tensor x({s.N, s.C, s.H, s.W}), w({s.K, s.C, s.R, s.R}), b = s.bias ? Tensor({s.K}) : Tensor();
        x.fill(0.5f);
        w.fill(0.01f);
        if (s.bias) b.fill(0.1f);
        const Shape ys = ops::conv2d_output_shape(x.shape(), w.shape(), p);
        Tensor y(ys), dy(ys), dx(x.shape()), dw(w.shape()), db = s.bias ? Tensor({s.K}) : Tensor();
        dy.fill(0.1f);
        double ms[3][4];
        for (int path = 0; path < (bf16 ? 3 : 2); ++path) {
            ops::set_cpu_conv(path == 0 ? ops::CpuConv::Im2col : ops::CpuConv::OneDnn);
            // bf16 at every channel count here (threshold 1): the timings that set ops::kMinBf16Channels.
            ops::set_cpu_precision(path == 2 ? ops::CpuPrecision::Bf16 : ops::CpuPrecision::Fp32, 1);
            ops::Workspace ws;
            for (int d = 0; d < 4; ++d) {
                double best = 1e30;
                for (int r = 0; r < 6; ++r) {
                    const double t0 = cpu_seconds();
                    if (d == 0) ops::conv2d_forward(x, w, b, y, p, ws);
                    if (d == 1) ops::conv2d_backward_data(dy, w, dx, p, ws);
                    if (d == 2) ops::conv2d_backward_filter(x, dy, dw, db, p, ws);
                    if (d == 3) ops::conv2d_forward_relu(x, w, b, y, p, ws);  // with a fused ReLU (nn::Model)
                    best = std::min(best, cpu_seconds() - t0);
                }
                ms[path][d] = best * 1e3;
            }
        }
        std::printf("%-16s forward %7.2f / %7.2f (%.2f)   data %7.2f / %7.2f (%.2f)   weights %7.2f / %7.2f (%.2f)   "
                    "forward+relu %7.2f / %7.2f (%.2f)\n",
                    s.name, ms[0][0], ms[1][0], ms[0][0] / ms[1][0], ms[0][1], ms[1][1], ms[0][1] / ms[1][1],
                    ms[0][2], ms[1][2], ms[0][2] / ms[1][2], ms[0][3], ms[1][3], ms[0][3] / ms[1][3]);
        if (bf16)
            std::printf("%-16s bf16 %s forward %7.2f (%.2f)   data %7.2f (%.2f)   weights %7.2f (%.2f)   "
                        "forward+relu %7.2f (%.2f)\n",
                        "", x.shape()[1] >= ops::kMinBf16Channels ? "     " : "(off)", ms[2][0], ms[1][0] / ms[2][0],
                        ms[2][1], ms[1][1] / ms[2][1], ms[2][2], ms[1][2] / ms[2][2], ms[2][3], ms[1][3] / ms[2][3]);
    }
    ops::set_cpu_precision(ops::CpuPrecision::Fp32);
    ops::set_cpu_conv(ops::CpuConv::Auto);
    return 0;
}
