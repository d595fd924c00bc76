// The image layers' CUDA ops against the CPU ops: average pooling and global average pooling (own kernels, the same
// sums in another order: 1e-5), BatchNorm through cuDNN in training (forward, running stats, backward with and
// without dx, accumulation) and evaluation (cuDNN inference forward, own backward), for batchnorm2d [N,C,H,W] and
// batchnorm1d [N,C] / [N,C,L] shapes. Reductions in another order: 1e-4 + 1e-4. The synchronised form (own kernels):
// test_gpu_batchnorm_sync.cpp.
#include <catch2/catch.hpp>

#include <vector>

#include "gpu_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/ops.hpp"

using namespace ringtrain;
using gpu_test::to_cpu;
using gpu_test::to_gpu;
using ops_test::random_tensor;

TEST_CASE("gpu average pooling forward and backward match the CPU", "[gpu][pool][avgpool]") {
    const ops::Pool2dParams params[] = {{2, 2, 2, 2, 0, 0}, {3, 3, 2, 2, 0, 0}, {3, 3, 1, 1, 1, 1}, {2, 3, 2, 1, 1, 1}};
    Rng rng(14);
    for (const auto& p : params) {
        const Shape xs{3, 4, 13, 10};
        const Shape ys = ops::pool2d_output_shape(xs, p);
        Tensor x = random_tensor(xs, rng);
        Tensor y(ys), gy(ys, Device::CUDA);
        Tensor gx = to_gpu(x);
        ops::avgpool2d_forward(x, y, p);
        ops::avgpool2d_forward(gx, gy, p);
        REQUIRE_GPU_CLOSE(gy, y, 1e-5, 1e-5);
        Tensor dy = random_tensor(ys, rng);
        Tensor gdy = to_gpu(dy);
        Tensor dx(xs), gdx(xs, Device::CUDA);
        ops::avgpool2d_backward(dy, dx, p);
        ops::avgpool2d_backward(gdy, gdx, p);
        REQUIRE_GPU_CLOSE(gdx, dx, 1e-5, 1e-5);
    }
}

TEST_CASE("gpu global average pooling forward and backward match the CPU", "[gpu][pool][avgpool]") {
    Rng rng(15);
    for (const Shape& xs : {Shape{2, 3, 5, 7}, Shape{4, 16, 32, 32}, Shape{1, 1, 1, 1}}) {
        Tensor x = random_tensor(xs, rng);
        Tensor y({xs[0], xs[1]}), gy({xs[0], xs[1]}, Device::CUDA);
        Tensor gx = to_gpu(x);
        ops::global_avgpool_forward(x, y);
        ops::global_avgpool_forward(gx, gy);
        REQUIRE_GPU_CLOSE(gy, y, 1e-6, 1e-5);
        Tensor dy = random_tensor({xs[0], xs[1]}, rng);
        Tensor gdy = to_gpu(dy);
        Tensor dx(xs), gdx(xs, Device::CUDA);
        ops::global_avgpool_backward(dy, dx);
        ops::global_avgpool_backward(gdy, gdx);
        REQUIRE_GPU_CLOSE(gdx, dx, 1e-7, 1e-6);
    }
}

namespace {

// One BatchNorm's tensors on one device: gamma/beta random, running stats at PyTorch's start values.
struct BnState {
    Tensor gamma, beta, mean, inv_std, running_mean, running_var, dgamma, dbeta;
    BnState(int64_t c, Rng& rng, Device d) {
        gamma = random_tensor({c}, rng, 0.5f, 1.5f);
        beta = random_tensor({c}, rng, -0.5f, 0.5f);
        running_mean = Tensor::zeros({c});
        running_var = Tensor::filled({c}, 1.0f);
        mean = Tensor::zeros({c});
        inv_std = Tensor::zeros({c});
        dgamma = random_tensor({c}, rng);  // accumulate adds to these
        dbeta = random_tensor({c}, rng);
        if (d == Device::CUDA)
            for (Tensor* t : {&gamma, &beta, &mean, &inv_std, &running_mean, &running_var, &dgamma, &dbeta})
                *t = to_gpu(*t);
    }
};

}  // namespace

TEST_CASE("gpu batchnorm (cuDNN) matches the CPU: training and evaluation, forward and backward", "[gpu][batchnorm]") {
    // [N, C, S] as the layer passes it: batchnorm2d (S = H*W), batchnorm1d on [N, C] (S = 1) and on [N, C, L].
    for (const Shape& xs : {Shape{4, 3, 20}, Shape{16, 5, 1}, Shape{3, 4, 7}, Shape{2, 8, 64}}) {
        for (const bool training : {true, false}) {
            for (const bool accumulate : {false, true}) {
                INFO("x " << shape_string(xs) << (training ? " training" : " evaluation")
                          << (accumulate ? " accumulate" : ""));
                const int64_t c = xs[1];
                Rng rng(21), grng(21);
                BnState cpu(c, rng, Device::CPU), gpu(c, grng, Device::CUDA);
                ops::BatchNormParams p;
                p.momentum = 0.2f;
                p.eps = xs[0] == 16 ? 0.5f : 1e-5f;  // one shape with a large eps: a path that ignored it would show
                p.training = training;
                for (int step = 0; step < 2; ++step) {  // two steps: the running stats move from their start values
                    Rng data(100 + step);
                    Tensor x = random_tensor(xs, data, -1.0f + step, 2.0f + step);
                    Tensor y(xs), gx = to_gpu(x), gy(xs, Device::CUDA);
                    ops::batchnorm_forward(x, cpu.gamma, cpu.beta, y, cpu.mean, cpu.inv_std, cpu.running_mean,
                                           cpu.running_var, p);
                    ops::batchnorm_forward(gx, gpu.gamma, gpu.beta, gy, gpu.mean, gpu.inv_std, gpu.running_mean,
                                           gpu.running_var, p);
                    REQUIRE_GPU_CLOSE(gy, y, 1e-4, 1e-4);
                    REQUIRE_GPU_CLOSE(gpu.mean, cpu.mean, 1e-5, 1e-4);
                    REQUIRE_GPU_CLOSE(gpu.inv_std, cpu.inv_std, 1e-5, 1e-4);
                    REQUIRE_GPU_CLOSE(gpu.running_mean, cpu.running_mean, 1e-5, 1e-4);
                    REQUIRE_GPU_CLOSE(gpu.running_var, cpu.running_var, 1e-5, 1e-4);  // unbiased on both

                    Tensor dy = random_tensor(xs, data);
                    Tensor gdy = to_gpu(dy);
                    Tensor dx(xs), gdx(xs, Device::CUDA);
                    ops::batchnorm_backward(x, dy, cpu.gamma, cpu.mean, cpu.inv_std, dx, cpu.dgamma, cpu.dbeta,
                                            training, accumulate);
                    ops::batchnorm_backward(gx, gdy, gpu.gamma, gpu.mean, gpu.inv_std, gdx, gpu.dgamma, gpu.dbeta,
                                            training, accumulate);
                    REQUIRE_GPU_CLOSE(gdx, dx, 1e-4, 1e-4);
                    REQUIRE_GPU_CLOSE(gpu.dgamma, cpu.dgamma, 1e-4, 1e-4);
                    REQUIRE_GPU_CLOSE(gpu.dbeta, cpu.dbeta, 1e-4, 1e-4);
                    // A first layer's backward: no dx, the parameter gradients all the same.
                    Tensor none, gnone;
                    ops::batchnorm_backward(x, dy, cpu.gamma, cpu.mean, cpu.inv_std, none, cpu.dgamma, cpu.dbeta,
                                            training, false);
                    ops::batchnorm_backward(gx, gdy, gpu.gamma, gpu.mean, gpu.inv_std, gnone, gpu.dgamma, gpu.dbeta,
                                            training, false);
                    REQUIRE_GPU_CLOSE(gpu.dgamma, cpu.dgamma, 1e-4, 1e-4);
                    REQUIRE_GPU_CLOSE(gpu.dbeta, cpu.dbeta, 1e-4, 1e-4);
                }
            }
        }
    }
}
