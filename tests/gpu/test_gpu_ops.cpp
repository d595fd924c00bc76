// Every CUDA op against the CPU op on random inputs, forward and backward. Tolerances (abs + rel*|cpu|) per op:
//   exact-order elementwise ops (activations, bias_add, vector ops, optimizer steps): 1e-6 + 1e-5 (float ulps of
//   expf/tanhf/sqrtf differ from Eigen's); reductions in a different order (bias_grad, losses, GEMM): 1e-4 + 1e-4;
//   cuDNN convolutions: 3e-2 + 1e-2, because cuDNN may use TF32 tensor cores (10-bit mantissa) for FP32 as PyTorch
//   does by default; max pooling picks elements, so it matches to 1e-6.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/sharded_loader.hpp"
#include "ringtrain/data/synthetic.hpp"
#include "ringtrain/ops/ops.hpp"

using namespace ringtrain;
using gpu_test::to_cpu;
using gpu_test::to_gpu;
using ops_test::random_tensor;

TEST_CASE("gpu gemm matches the CPU in all transpose combinations", "[gpu][gemm]") {
    Rng rng(1);
    const int64_t M = 37, N = 29, K = 53;
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
            Tensor a = random_tensor(ta ? Shape{K, M} : Shape{M, K}, rng);
            Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, rng);
            Tensor c = random_tensor({M, N}, rng);
            Tensor ga = to_gpu(a), gb = to_gpu(b), gc = to_gpu(c);
            ops::gemm(a, ta, b, tb, c, 0.7f, 0.3f);
            ops::gemm(ga, ta, gb, tb, gc, 0.7f, 0.3f);
            REQUIRE_GPU_CLOSE(gc, c, 1e-4, 1e-4);
            // beta = 0 never reads C (NaN there must not leak)
            gc.fill(std::numeric_limits<float>::quiet_NaN());
            ops::gemm(a, ta, b, tb, c, 1.0f, 0.0f);
            ops::gemm(ga, ta, gb, tb, gc, 1.0f, 0.0f);
            REQUIRE_GPU_CLOSE(gc, c, 1e-4, 1e-4);
        }
}

TEST_CASE("gpu bias add and bias grad", "[gpu][bias]") {
    Rng rng(2);
    // Small shapes, and ones large enough for several row slices (the two-pass bias gradient).
    for (const Shape& shape : {Shape{17, 6}, Shape{5, 7, 9, 11}, Shape{1024, 10}, Shape{200, 3, 20, 20}}) {
        Tensor y = random_tensor(shape, rng), bias = random_tensor({shape[1]}, rng);
        Tensor gy = to_gpu(y), gbias = to_gpu(bias);
        ops::bias_add(y, bias);
        ops::bias_add(gy, gbias);
        REQUIRE_GPU_CLOSE(gy, y, 1e-6, 1e-5);
        for (bool acc : {false, true}) {
            Tensor db = random_tensor({shape[1]}, rng);
            Tensor gdb = to_gpu(db);
            ops::bias_grad(y, db, acc);
            ops::bias_grad(gy, gdb, acc);
            REQUIRE_GPU_CLOSE(gdb, db, 1e-4, 1e-4);
        }
    }
}

TEST_CASE("gpu convolution forward and backward match the CPU", "[gpu][conv]") {
    struct Case {
        Shape x, w;
        ops::Conv2dParams p;
        bool bias;
    };
    const Case cases[] = {
        {{4, 3, 13, 11}, {5, 3, 3, 3}, {1, 1, 1, 1}, true},
        {{3, 1, 28, 28}, {6, 1, 5, 5}, {1, 1, 0, 0}, true},     // LeNet conv1
        {{2, 4, 15, 17}, {8, 4, 5, 3}, {2, 3, 2, 1}, false},    // strides and padding differ per axis
        {{2, 3, 32, 32}, {16, 3, 11, 11}, {4, 4, 2, 2}, true},  // AlexNet-style stride 4
    };
    Rng rng(3);
    // With TF32 off (RINGTRAIN_CUDNN_TF32=0: ctest's test_gpu_ops_conv_fp32) cuDNN computes in FP32 like the CPU and the
    // tolerance is 30x tighter: a wrong descriptor or algorithm with errors near 1 % would pass the TF32 bound.
    const char* tf32_env = std::getenv("RINGTRAIN_CUDNN_TF32");
    const bool tf32 = tf32_env == nullptr || std::string(tf32_env) != "0";
    const double abs_tol = tf32 ? 3e-2 : 1e-3, rel_tol = tf32 ? 1e-2 : 1e-3;
    for (const Case& c : cases) {
        const Shape ys = ops::conv2d_output_shape(c.x, c.w, c.p);
        Tensor x = random_tensor(c.x, rng), w = random_tensor(c.w, rng);
        Tensor bias = c.bias ? random_tensor({c.w[0]}, rng) : Tensor();
        Tensor y(ys), gy(ys, Device::CUDA);
        Tensor gx = to_gpu(x), gw = to_gpu(w), gbias = c.bias ? to_gpu(bias) : Tensor();
        ops::Workspace ws, gws(Device::CUDA), cpu_ws_for_gpu;  // the GPU op also accepts a CPU workspace
        ops::conv2d_forward(x, w, bias, y, c.p, ws);
        ops::conv2d_forward(gx, gw, gbias, gy, c.p, gws);
        REQUIRE_GPU_CLOSE(gy, y, abs_tol, rel_tol);

        Tensor dy = random_tensor(ys, rng);
        Tensor gdy = to_gpu(dy);
        Tensor dx(c.x), gdx(c.x, Device::CUDA);
        ops::conv2d_backward_data(dy, w, dx, c.p, ws);
        ops::conv2d_backward_data(gdy, gw, gdx, c.p, cpu_ws_for_gpu);
        REQUIRE_GPU_CLOSE(gdx, dx, abs_tol, rel_tol);

        for (bool acc : {false, true}) {
            Tensor dw = random_tensor(c.w, rng);
            Tensor db = c.bias ? random_tensor({c.w[0]}, rng) : Tensor();
            Tensor gdw = to_gpu(dw), gdb = c.bias ? to_gpu(db) : Tensor();
            ops::conv2d_backward_filter(x, dy, dw, db, c.p, ws, acc);
            ops::conv2d_backward_filter(gx, gdy, gdw, gdb, c.p, gws, acc);
            REQUIRE_GPU_CLOSE(gdw, dw, abs_tol, rel_tol);
            if (c.bias) REQUIRE_GPU_CLOSE(gdb, db, 1e-4, 1e-4);
        }
    }
}

TEST_CASE("gpu max pooling forward and backward match the CPU", "[gpu][pool]") {
    const ops::Pool2dParams params[] = {{2, 2, 2, 2, 0, 0}, {3, 3, 2, 2, 0, 0}, {3, 3, 1, 1, 1, 1}, {2, 2, 2, 2, 1, 1}};
    Rng rng(4);
    for (const auto& p : params) {
        const Shape xs{3, 4, 13, 10};
        const Shape ys = ops::pool2d_output_shape(xs, p);
        Tensor x = random_tensor(xs, rng);  // distinct values: no ties
        Tensor y(ys), gy(ys, Device::CUDA);
        Tensor gx = to_gpu(x);
        ops::maxpool2d_forward(x, y, p);
        ops::maxpool2d_forward(gx, gy, p);
        REQUIRE_GPU_CLOSE(gy, y, 1e-6, 0.0);
        Tensor dy = random_tensor(ys, rng);
        Tensor gdy = to_gpu(dy);
        Tensor dx(xs), gdx(xs, Device::CUDA);
        ops::maxpool2d_backward(x, y, dy, dx, p);
        ops::maxpool2d_backward(gx, gy, gdy, gdx, p);
        REQUIRE_GPU_CLOSE(gdx, dx, 1e-5, 1e-5);
    }
}

TEST_CASE("gpu activations forward and backward", "[gpu][activation]") {
    Rng rng(5);
    for (auto a : {ops::Activation::ReLU, ops::Activation::Sigmoid, ops::Activation::Tanh}) {
        Tensor x = random_tensor({1000, 7}, rng, -6.0f, 6.0f), dy = random_tensor({1000, 7}, rng);
        Tensor y(x.shape()), dx(x.shape());
        Tensor gx = to_gpu(x), gdy = to_gpu(dy), gyv(x.shape(), Device::CUDA), gdx(x.shape(), Device::CUDA);
        ops::activation_forward(a, x, y);
        ops::activation_forward(a, gx, gyv);
        REQUIRE_GPU_CLOSE(gyv, y, 1e-6, 1e-5);
        ops::activation_backward(a, y, dy, dx);
        Tensor gy_from_cpu = to_gpu(y);
        ops::activation_backward(a, gy_from_cpu, gdy, gdx);
        REQUIRE_GPU_CLOSE(gdx, dx, 1e-6, 1e-5);
        ops::activation_backward(a, gy_from_cpu, gdy, gdy);  // dx may alias dy
        REQUIRE_GPU_CLOSE(gdy, dx, 1e-6, 1e-5);
    }
}

TEST_CASE("gpu dropout: mask values, keep rate, reproducible, backward", "[gpu][dropout]") {
    const int64_t n = 200000;
    const float p = 0.3f;
    Rng rng(6);
    Tensor x = random_tensor({n}, rng), dy = random_tensor({n}, rng);
    Tensor gx = to_gpu(x), gdy = to_gpu(dy);
    Tensor gy({n}, Device::CUDA), gmask({n}, Device::CUDA), gdx({n}, Device::CUDA);
    Rng r1(42), r2(42);
    ops::dropout_forward(gx, gy, gmask, p, r1);
    Tensor mask = to_cpu(gmask), y = to_cpu(gy);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
        const float m = mask.data()[i];
        REQUIRE((m == 0.0f || std::fabs(m - 1.0f / (1.0f - p)) < 1e-6f));
        kept += m != 0.0f;
        REQUIRE(y.data()[i] == x.data()[i] * m);
    }
    REQUIRE(std::fabs(static_cast<double>(kept) / n - (1.0 - p)) < 0.01);
    Tensor gmask2({n}, Device::CUDA);
    ops::dropout_forward(gx, gy, gmask2, p, r2);  // same rng state: same mask
    REQUIRE_GPU_CLOSE(gmask2, mask, 1e-30, 0.0);  // exact
    REQUIRE(r1.state() == r2.state());
    ops::dropout_forward(gx, gy, gmask2, p, r1);  // the next draw: a different mask
    Tensor mask2 = to_cpu(gmask2);
    int64_t same = 0;
    for (int64_t i = 0; i < n; ++i) same += mask2.data()[i] == mask.data()[i];
    REQUIRE(same < n * 0.7);
    ops::dropout_backward(gdy, gmask, gdx);
    Tensor dx({n});
    ops::dropout_backward(dy, mask, dx);
    REQUIRE_GPU_CLOSE(gdx, dx, 1e-30, 0.0);  // exact
    ops::dropout_forward(gx, gy, gmask, 0.0f, r1);  // p = 0 keeps everything
    REQUIRE_GPU_CLOSE(gy, x, 1e-30, 0.0);  // exact
}

TEST_CASE("gpu dropout mask is bitwise the CPU op's mask", "[gpu][dropout]") {
    const float p = 0.3f;
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{200003}}) {
        Rng rng(8);
        Tensor x = random_tensor({n}, rng);
        Tensor y({n}), mask({n}), gy({n}, Device::CUDA), gmask({n}, Device::CUDA);
        Rng cpu_rng(77), gpu_rng(77);
        ops::dropout_forward(x, y, mask, p, cpu_rng);
        ops::dropout_forward(to_gpu(x), gy, gmask, p, gpu_rng);
        REQUIRE(cpu_rng.state() == gpu_rng.state());
        const Tensor from_gpu = to_cpu(gmask);
        for (int64_t i = 0; i < n; ++i) REQUIRE(from_gpu.data()[i] == mask.data()[i]);
        REQUIRE_GPU_CLOSE(gy, y, 1e-30, 0.0);  // exact
    }
}

TEST_CASE("gpu softmax cross-entropy forward and backward", "[gpu][loss]") {
    Rng rng(7);
    for (int64_t K : {10, 1000}) {
        const int64_t N = 67;
        Tensor logits = random_tensor({N, K}, rng, -8.0f, 8.0f), labels({N});
        for (int64_t i = 0; i < N; ++i) labels.data()[i] = static_cast<float>(rng.below(K));
        Tensor probs({N, K}), gprobs({N, K}, Device::CUDA);
        Tensor gl = to_gpu(logits), glab = to_gpu(labels);
        const auto cs = ops::softmax_cross_entropy_forward(logits, labels, probs);
        const auto gs = ops::softmax_cross_entropy_forward(gl, glab, gprobs);
        REQUIRE(gs.loss_sum == Approx(cs.loss_sum).epsilon(1e-5));
        REQUIRE(gs.correct == cs.correct);
        REQUIRE_GPU_CLOSE(gprobs, probs, 1e-6, 1e-4);
        Tensor d({N, K}), gd({N, K}, Device::CUDA);
        ops::softmax_cross_entropy_backward(probs, labels, d, 1.0f / N);
        ops::softmax_cross_entropy_backward(gprobs, glab, gd, 1.0f / N);
        REQUIRE_GPU_CLOSE(gd, d, 1e-7, 1e-4);
    }
    Tensor logits({2, 3}, Device::CUDA), probs({2, 3}, Device::CUDA);
    logits.zero();
    Tensor bad = to_gpu(Tensor::filled({2}, 3.0f));
    REQUIRE_THROWS_AS(ops::softmax_cross_entropy_forward(logits, bad, probs), InputError);
}

TEST_CASE("gpu sigmoid binary cross-entropy forward and backward", "[gpu][loss]") {
    Rng rng(8);
    const int64_t N = 1000;
    Tensor z = random_tensor({N, 1}, rng, -40.0f, 40.0f), t({N});
    for (int64_t i = 0; i < N; ++i) t.data()[i] = static_cast<float>(rng.below(2));
    Tensor p({N, 1}), gp({N, 1}, Device::CUDA);
    Tensor gz = to_gpu(z), gt = to_gpu(t);
    const auto cs = ops::sigmoid_bce_forward(z, t, p);
    const auto gs = ops::sigmoid_bce_forward(gz, gt, gp);
    REQUIRE(gs.loss_sum == Approx(cs.loss_sum).epsilon(1e-5));
    REQUIRE(gs.correct == cs.correct);
    REQUIRE_GPU_CLOSE(gp, p, 1e-7, 1e-5);
    Tensor d({N, 1}), gd({N, 1}, Device::CUDA);
    ops::sigmoid_bce_backward(p, t, d, 0.5f);
    ops::sigmoid_bce_backward(gp, gt, gd, 0.5f);
    REQUIRE_GPU_CLOSE(gd, d, 1e-7, 1e-5);
    Tensor bad = to_gpu(Tensor::filled({N}, 2.0f));
    REQUIRE_THROWS_AS(ops::sigmoid_bce_forward(gz, bad, gp), InputError);
}

TEST_CASE("gpu LossTotals: device-side totals equal the CPU's; a bad label is reported by take()", "[gpu][loss]") {
    Rng rng(9);
    ops::LossTotals cpu_totals, gpu_totals;
    for (int step = 0; step < 3; ++step) {
        const int64_t N = 33 + step, K = 10;
        Tensor logits = random_tensor({N, K}, rng, -5.0f, 5.0f), labels({N}), probs({N, K});
        for (int64_t i = 0; i < N; ++i) labels.data()[i] = static_cast<float>(rng.below(K));
        Tensor gl = to_gpu(logits), glab = to_gpu(labels), gprobs({N, K}, Device::CUDA);
        ops::softmax_cross_entropy_forward(logits, labels, probs, cpu_totals);
        ops::softmax_cross_entropy_forward(gl, glab, gprobs, gpu_totals);
        REQUIRE_GPU_CLOSE(gprobs, probs, 1e-6, 1e-4);
    }
    Tensor z = random_tensor({40}, rng, -5.0f, 5.0f), t({40}), p({40});
    for (int64_t i = 0; i < 40; ++i) t.data()[i] = static_cast<float>(i % 2);
    Tensor gz = to_gpu(z), gt = to_gpu(t), gp({40}, Device::CUDA);
    ops::sigmoid_bce_forward(z, t, p, cpu_totals);
    ops::sigmoid_bce_forward(gz, gt, gp, gpu_totals);
    REQUIRE(gpu_totals.pending());
    const auto c = cpu_totals.take();
    const auto g = gpu_totals.take();
    REQUIRE(g.loss_sum == Approx(c.loss_sum).epsilon(1e-5));
    REQUIRE(g.correct == c.correct);
    REQUIRE_FALSE(gpu_totals.pending());
    const auto zero = gpu_totals.take();
    REQUIRE(zero.loss_sum == 0.0);
    // The device record was reset by take(): a second round adds from zero.
    ops::sigmoid_bce_forward(gz, gt, gp, gpu_totals);
    ops::sigmoid_bce_forward(z, t, p, cpu_totals);
    REQUIRE(gpu_totals.take().loss_sum == Approx(cpu_totals.take().loss_sum).epsilon(1e-5));
    // A bad label does not stop the forward on the GPU; take() names it, and the next round is clean.
    Tensor logits({4, 3}, Device::CUDA), probs({4, 3}, Device::CUDA);
    logits.zero();
    Tensor labels = Tensor::filled({4}, 1.0f);
    labels.data()[2] = 7.0f;
    Tensor glab = to_gpu(labels);
    ops::softmax_cross_entropy_forward(logits, glab, probs, gpu_totals);
    try {
        gpu_totals.take();
        FAIL("take() did not report the bad label");
    } catch (const InputError& e) {
        REQUIRE(std::string(e.what()).find("row 2") != std::string::npos);
        REQUIRE(std::string(e.what()).find("[0, 3)") != std::string::npos);
    }
    Tensor good = to_gpu(Tensor::filled({4}, 1.0f));
    ops::softmax_cross_entropy_forward(logits, good, probs, gpu_totals);
    const auto clean = gpu_totals.take();
    REQUIRE(clean.loss_sum == Approx(4.0 * std::log(3.0)).epsilon(1e-5));
}

TEST_CASE("gpu AsyncUploader: batches arrive intact, and the previous batch stays valid", "[gpu][upload]") {
    Rng rng(10);
    AsyncUploader up;
    std::vector<Tensor> xs, ys;
    for (int64_t n : {64, 64, 64, 128, 128, 7, 64}) {
        xs.push_back(random_tensor({n, 1, 28, 28}, rng));
        ys.push_back(random_tensor({n}, rng));
    }
    Tensor sum = Tensor::zeros({64, 1, 28, 28}, Device::CUDA);
    const Tensor* prev_x = nullptr;
    const Tensor* prev_host = nullptr;
    for (size_t i = 0; i < xs.size(); ++i) {
        const Tensor* host[2] = {&xs[i], &ys[i]};
        const auto dev = up.upload(host);
        REQUIRE(dev.size() == 2);
        REQUIRE(dev[0].device() == Device::CUDA);
        REQUIRE(dev[0].shape() == xs[i].shape());
        // Work queued after the upload sees the data (stream order, no host wait).
        if (xs[i].dim(0) == 64) ops::axpy(1.0f, dev[0], sum);
        REQUIRE_GPU_CLOSE(dev[0], xs[i], 1e-30, 0.0);
        REQUIRE_GPU_CLOSE(dev[1], ys[i], 1e-30, 0.0);
        // The batch handed out one call earlier is still intact.
        if (prev_x != nullptr) REQUIRE_GPU_CLOSE(*prev_x, *prev_host, 1e-30, 0.0);
        prev_x = &dev[0];
        prev_host = &xs[i];
    }
    // Above 16 MiB the host copy into pinned memory is split between threads: still byte for byte.
    Tensor big = random_tensor({5, 1024, 1024}, rng), labels = random_tensor({5}, rng);
    const Tensor* big_host[2] = {&big, &labels};
    const auto big_dev = up.upload(big_host);
    REQUIRE_GPU_CLOSE(big_dev[0], big, 1e-30, 0.0);
    REQUIRE_GPU_CLOSE(big_dev[1], labels, 1e-30, 0.0);
    Tensor want = Tensor::zeros({64, 1, 28, 28});
    for (const Tensor& x : xs)
        if (x.dim(0) == 64) ops::axpy(1.0f, x, want);
    REQUIRE_GPU_CLOSE(sum, want, 1e-6, 1e-6);
    // Steady shapes need no new device buffers: only the first uses and the shape changes waited.
    const uint64_t before = up.reallocations();
    for (int i = 0; i < 10; ++i) {
        const Tensor* host[2] = {&xs[0], &ys[0]};
        up.upload(host);
    }
    REQUIRE(up.reallocations() == before);
    Tensor on_gpu({3}, Device::CUDA);
    const Tensor* wrong[1] = {&on_gpu};
    REQUIRE_THROWS_AS(up.upload(wrong), Error);
}

TEST_CASE("gpu AsyncUploader: page-locked batches are copied in place, and a loader refills them only after their copies",
          "[gpu][upload]") {
    Rng rng(11);
    AsyncUploader up;
    Tensor locked = up.host_tensor({64, 3, 32, 32});
    locked.copy_from(random_tensor({64, 3, 32, 32}, rng));
    Tensor plain = random_tensor({64}, rng);
    const Tensor* host[2] = {&locked, &plain};
    const auto dev = up.upload(host);
    REQUIRE(up.direct_copies() == 1);
    REQUIRE(up.staged_copies() == 1);
    up.wait_for_host_reads();
    const Tensor want = locked.clone();
    locked.fill(-1.0f);  // after the wait: the copy has what the tensor held when it was uploaded
    REQUIRE_GPU_CLOSE(dev[0], want, 1e-30, 0.0);
    REQUIRE_GPU_CLOSE(dev[1], plain, 1e-30, 0.0);

    // The trainer's wiring (train/trainer.cpp): a prefetching loader fills page-locked buffers and waits for their
    // copies before refilling one. After each upload the test queues ~5 ms of GPU work (100 passes over 64 MiB), so
    // the GPU falls steps behind the host and each copy waits in its stream behind the work that read its device slot
    // two uploads earlier: a loader that refilled a buffer without waiting would overwrite batches not yet copied, and
    // the sums (inputs and labels) would differ from those of the same loader's batches without the hooks.
    data::SyntheticDataset ds({3, 64, 64}, 10, 300, 5);
    data::LoaderOptions o;
    o.batch_size = 32;
    o.prefetch_probe_batches = 0;
    data::ShardedLoader reference(ds, o);
    o.allocate_host = [&up](Shape shape) { return up.host_tensor(std::move(shape)); };
    o.before_refill = [&up] { up.wait_for_host_reads(); };
    data::ShardedLoader loader(ds, o);
    Tensor sum = Tensor::zeros({32, 3, 64, 64}, Device::CUDA), label_sum = Tensor::zeros({32}, Device::CUDA);
    Tensor want_sum = Tensor::zeros({32, 3, 64, 64}), want_labels = Tensor::zeros({32});
    Tensor busy_x = Tensor::zeros({int64_t{16} << 20}, Device::CUDA), busy_y = Tensor::zeros({int64_t{16} << 20}, Device::CUDA);
    const uint64_t staged = up.staged_copies();
    data::Batch b, rb;
    int64_t steps = 0;
    for (int64_t e = 0; e < 3; ++e) {
        loader.start_epoch(e);
        reference.start_epoch(e);
        while (loader.next(b)) {
            REQUIRE(reference.next(rb));
            const Tensor* batch[2] = {&b.x, &b.y};
            const auto d = up.upload(batch);
            ops::axpy(1.0f, d[0], sum);
            ops::axpy(1.0f, d[1], label_sum);
            for (int k = 0; k < 100; ++k) ops::axpy(1e-3f, busy_x, busy_y);  // keep the GPU behind the host
            ops::axpy(1.0f, rb.x, want_sum);
            ops::axpy(1.0f, rb.y, want_labels);
            ++steps;
        }
    }
    REQUIRE(steps == 27);
    REQUIRE(up.staged_copies() == staged);  // every batch went in place
    REQUIRE_GPU_CLOSE(sum, want_sum, 1e-4, 1e-5);
    REQUIRE_GPU_CLOSE(label_sum, want_labels, 0.0, 0.0);
}

TEST_CASE("gpu vector ops: scale, axpy, all_finite, sum_squares", "[gpu][vector]") {
    Rng rng(9);
    Tensor x = random_tensor({100003}, rng), y = random_tensor({100003}, rng);
    Tensor gx = to_gpu(x), gy = to_gpu(y);
    ops::scale(x, -1.5f);
    ops::scale(gx, -1.5f);
    REQUIRE_GPU_CLOSE(gx, x, 1e-6, 1e-6);
    ops::axpy(0.25f, x, y);
    ops::axpy(0.25f, gx, gy);
    REQUIRE_GPU_CLOSE(gy, y, 1e-6, 1e-6);
    REQUIRE(ops::sum_squares(gy) == Approx(ops::sum_squares(y)).epsilon(1e-9));
    REQUIRE(ops::all_finite(gy));
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        Tensor z = y.clone();
        z.data()[77777] = bad;
        REQUIRE_FALSE(ops::all_finite(to_gpu(z)));
    }
}

TEST_CASE("gpu optimizer updates match the CPU over several steps", "[gpu][optim]") {
    Rng rng(10);
    const Shape s{4097};
    SECTION("sgd") {
        for (float mu : {0.0f, 0.9f})
            for (bool nesterov : {false, true}) {
                ops::SgdParams p{0.05f, mu, 1e-3f, nesterov};
                Tensor w = random_tensor(s, rng), v = Tensor::zeros(s);
                Tensor gw = to_gpu(w), gv = to_gpu(v);
                for (int step = 0; step < 3; ++step) {
                    Tensor g = random_tensor(s, rng);
                    ops::sgd_update(w, g, v, p);
                    ops::sgd_update(gw, to_gpu(g), gv, p);
                }
                REQUIRE_GPU_CLOSE(gw, w, 1e-6, 1e-5);
                REQUIRE_GPU_CLOSE(gv, v, 1e-6, 1e-5);
            }
    }
    SECTION("adam") {
        Tensor w = random_tensor(s, rng), m = Tensor::zeros(s), v = Tensor::zeros(s);
        Tensor gw = to_gpu(w), gm = to_gpu(m), gv = to_gpu(v);
        for (int64_t step = 1; step <= 4; ++step) {
            ops::AdamParams p{1e-2f, 0.9f, 0.999f, 1e-8f, 1e-4f, step};
            Tensor g = random_tensor(s, rng);
            ops::adam_update(w, g, m, v, p);
            ops::adam_update(gw, to_gpu(g), gm, gv, p);
        }
        REQUIRE_GPU_CLOSE(gw, w, 1e-6, 1e-5);
        REQUIRE_GPU_CLOSE(gm, m, 1e-6, 1e-5);
        REQUIRE_GPU_CLOSE(gv, v, 1e-7, 1e-5);
    }
    SECTION("adadelta") {
        Tensor w = random_tensor(s, rng), sq = Tensor::zeros(s), acc = Tensor::zeros(s);
        Tensor gw = to_gpu(w), gsq = to_gpu(sq), gacc = to_gpu(acc);
        ops::AdadeltaParams p{1.0f, 0.9f, 1e-6f, 1e-4f};
        for (int step = 0; step < 4; ++step) {
            Tensor g = random_tensor(s, rng);
            ops::adadelta_update(w, g, sq, acc, p);
            ops::adadelta_update(gw, to_gpu(g), gsq, gacc, p);
        }
        REQUIRE_GPU_CLOSE(gw, w, 1e-6, 1e-5);
        REQUIRE_GPU_CLOSE(gsq, sq, 1e-7, 1e-5);
        REQUIRE_GPU_CLOSE(gacc, acc, 1e-7, 1e-5);
    }
}

TEST_CASE("gpu caching allocator reuses blocks: no cudaMalloc in a steady loop", "[gpu][allocator]") {
    auto step = [] {
        Tensor a({1000, 100}, Device::CUDA), b({333}, Device::CUDA), c({1 << 20}, Device::CUDA);
        a.fill(1.0f);
        c.zero();
        return a.numel() + b.numel() + c.numel();
    };
    step();
    const CudaAllocatorStats before = cuda_allocator_stats();
    for (int i = 0; i < 50; ++i) step();
    const CudaAllocatorStats after = cuda_allocator_stats();
    REQUIRE(after.device_allocations == before.device_allocations);
    REQUIRE(after.bytes_in_use == before.bytes_in_use);
    REQUIRE(after.peak_bytes_in_use >= after.bytes_in_use);
    REQUIRE(after.bytes_cached > 0);
    Tensor f = Tensor::filled({5}, 2.5f, Device::CUDA);
    REQUIRE_GPU_CLOSE(f, Tensor::filled({5}, 2.5f), 1e-30, 0.0);  // exact
}
