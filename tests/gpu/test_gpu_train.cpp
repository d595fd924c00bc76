// A tiny model trained k steps on the CPU and on the GPU from the same initial parameters and data: the loss
// curves agree to 1e-4 relative and the final parameters to 1e-4 + 1e-3 relative. The model is a hand-written
// 2-layer MLP (linear-relu-linear, softmax cross-entropy, SGD with momentum) built from the ops directly, since
// nn::Model has no way to move its parameters to another device.
#include <catch2/catch.hpp>

#include <vector>

#include "gpu_test_util.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/ops/ops.hpp"
#include "ringtrain/telemetry/gpu_monitor.hpp"

using namespace ringtrain;

namespace {

struct Mlp {
    Tensor w1, b1, w2, b2;       // [D,H], [H], [H,C], [C]
    Tensor v_w1, v_b1, v_w2, v_b2;  // momentum
};

Tensor on(const Tensor& t, Device d) {
    Tensor r(t.shape(), d);
    r.copy_from(t);
    return r;
}

// Returns the loss of each step; leaves the trained parameters in `m`.
std::vector<double> train(Mlp& m, const Tensor& x_cpu, const Tensor& labels_cpu, Device dev, int steps) {
    const int64_t N = x_cpu.dim(0), D = x_cpu.dim(1), H = m.w1.dim(1), C = m.w2.dim(1);
    Tensor x = on(x_cpu, dev), labels = on(labels_cpu, dev);
    Tensor h({N, H}, dev), dh({N, H}, dev), z({N, C}, dev), probs({N, C}, dev), dz({N, C}, dev);
    Tensor dw1({D, H}, dev), db1({H}, dev), dw2({H, C}, dev), db2({C}, dev);
    const ops::SgdParams sgd{0.1f, 0.9f, 1e-4f, false};
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
        ops::gemm(x, false, m.w1, false, h);
        ops::bias_add(h, m.b1);
        ops::activation_forward(ops::Activation::ReLU, h, h);
        ops::gemm(h, false, m.w2, false, z);
        ops::bias_add(z, m.b2);
        losses.push_back(ops::softmax_cross_entropy_forward(z, labels, probs).loss_sum / N);
        ops::softmax_cross_entropy_backward(probs, labels, dz, 1.0f / N);
        ops::gemm(h, true, dz, false, dw2);
        ops::bias_grad(dz, db2);
        ops::gemm(dz, false, m.w2, true, dh);
        ops::activation_backward(ops::Activation::ReLU, h, dh, dh);
        ops::gemm(x, true, dh, false, dw1);
        ops::bias_grad(dh, db1);
        ops::sgd_update(m.w1, dw1, m.v_w1, sgd);
        ops::sgd_update(m.b1, db1, m.v_b1, sgd);
        ops::sgd_update(m.w2, dw2, m.v_w2, sgd);
        ops::sgd_update(m.b2, db2, m.v_b2, sgd);
    }
    return losses;
}

}  // namespace

TEST_CASE("a 2-layer MLP trains to the same loss curve on the CPU and the GPU", "[gpu][train]") {
    const int64_t N = 128, D = 20, H = 32, C = 5;
    const int steps = 30;
    Rng rng(123);
    Tensor x = ops_test::random_tensor({N, D}, rng), labels({N});
    // A learnable rule: the class is the argmax of the first C features.
    for (int64_t n = 0; n < N; ++n) {
        int64_t best = 0;
        for (int64_t c = 1; c < C; ++c)
            if (x.data()[n * D + c] > x.data()[n * D + best]) best = c;
        labels.data()[n] = static_cast<float>(best);
    }
    Mlp cpu{ops_test::random_tensor({D, H}, rng, -0.3f, 0.3f), Tensor::zeros({H}),
            ops_test::random_tensor({H, C}, rng, -0.3f, 0.3f), Tensor::zeros({C}),
            Tensor::zeros({D, H}), Tensor::zeros({H}), Tensor::zeros({H, C}), Tensor::zeros({C})};
    Mlp gpu{on(cpu.w1, Device::CUDA), on(cpu.b1, Device::CUDA), on(cpu.w2, Device::CUDA), on(cpu.b2, Device::CUDA),
            on(cpu.v_w1, Device::CUDA), on(cpu.v_b1, Device::CUDA), on(cpu.v_w2, Device::CUDA),
            on(cpu.v_b2, Device::CUDA)};
    const std::vector<double> lc = train(cpu, x, labels, Device::CPU, steps);
    const std::vector<double> lg = train(gpu, x, labels, Device::CUDA, steps);
    REQUIRE(lc.size() == lg.size());
    for (size_t i = 0; i < lc.size(); ++i) {
        INFO("step " << i << ": cpu loss " << lc[i] << ", gpu loss " << lg[i]);
        REQUIRE(lg[i] == Approx(lc[i]).epsilon(1e-4));
    }
    REQUIRE(lc.back() < 0.7 * lc.front());  // it learned something
    REQUIRE_GPU_CLOSE(gpu.w1, cpu.w1, 1e-4, 1e-3);
    REQUIRE_GPU_CLOSE(gpu.w2, cpu.w2, 1e-4, 1e-3);
    REQUIRE_GPU_CLOSE(gpu.b2, cpu.b2, 1e-4, 1e-3);
}

TEST_CASE("GpuMonitor samples the current GPU through NVML", "[gpu][gpu_monitor]") {
    std::string why;
    auto monitor = telemetry::GpuMonitor::open(cuda_pci_bus_id(), &why);
    if (!monitor) {
        WARN("no NVML here: " << why);  // a CUDA device without the driver's NVML is possible (containers)
        return;
    }
    monitor->start(0.01);
    Tensor a({1024, 1024}, Device::CUDA), b({1024, 1024}, Device::CUDA), c({1024, 1024}, Device::CUDA);
    a.fill(1.0f);
    b.fill(0.5f);
    for (int i = 0; i < 200; ++i) ops::gemm(a, false, b, false, c);
    cuda_synchronize();
    monitor->stop();
    const telemetry::GpuUsage u = monitor->usage();
    CHECK(u.samples >= 1);
    CHECK(u.max_gpu_percent <= 100.0);
    CHECK(u.mean_gpu_percent <= u.max_gpu_percent);
    CHECK(u.total_mb > 0);
    CHECK(u.peak_used_mb > 0);
    CHECK(u.peak_used_mb <= u.total_mb);
}
