// The quality CNN's BatchNorm and max-pooling layers at its training batch, each direction timed on our own CPU loops
// (ops::batchnorm_*, ops::maxpool2d_*) and on oneDNN's primitives (batch_normalization, pooling max with its
// workspace) in the same plain NCHW float32 layout, and oneDNN's in its blocked nChw16c layout: issue 17 asks whether
// oneDNN's pooling and BatchNorm, and blocked layouts kept between layers, should run them, as its convolutions do.
// Also the bytes each pass must move at least, against this core's copy bandwidth. Results: bench/RESULTS.md,
// "BatchNorm and max pooling: our loops against oneDNN's".
// Times are this process's CPU time (best of 6 calls), so other load on a shared machine disturbs them little.
//
//   taskset -c 1 bench_bn_pool_paths        (one intra-op thread)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <vector>

#include <dnnl.hpp>

#include "ringtrain/ops/ops.hpp"
#include "ringtrain/ops/threads.hpp"

using namespace ringtrain;
using dnnl::memory;

namespace {

double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best of 6 calls after one warm-up, in ms of CPU time.
double best_ms(const std::function<void()>& f) {
    f();
    double best = 1e30;
    for (int i = 0; i < 6; ++i) {
        const double t0 = cpu_seconds();
        f();
        best = std::min(best, cpu_seconds() - t0);
    }
    return best * 1e3;
}

struct Shape4 {
    const char* name;
    int64_t N, C, H, W;
};

}  // namespace

int main() {
    ops::set_intra_op_threads(1);
    const Shape4 shapes[] = {{"quality bn1/pool1", 256, 16, 64, 64},
                             {"quality bn2/pool2", 256, 32, 32, 32},
                             {"quality bn3/pool3", 256, 64, 16, 16}};
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream st(eng);
    // This core's copy bandwidth (read + write), the bound of every pass below.
    double copy_gbs = 0;
    {
        std::vector<float> a(size_t{1} << 25, 1.0f), b(a.size());
        const double ms = best_ms([&] { std::memcpy(b.data(), a.data(), a.size() * sizeof(float)); });
        copy_gbs = 2.0 * static_cast<double>(a.size() * sizeof(float)) / (ms * 1e6);
    }
    std::printf("oneDNN %d.%d.%d; ms of CPU time, best of 6, one thread; copy bandwidth %.1f GB/s (read + write)\n",
                dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch, copy_gbs);
    std::printf("%-20s %-13s %9s %9s %7s %12s %14s\n", "layer", "pass", "ours", "oneDNN", "ratio", "ours GB/s",
                "oneDNN blocked");
    const auto row = [&](const char* layer, const char* pass, double ours, double onednn, double blocked,
                         double min_bytes) {
        std::printf("%-20s %-13s %9.2f %9.2f %7.2f %12.1f %14.2f\n", layer, pass, ours, onednn, ours / onednn,
                    min_bytes / (ours * 1e6), blocked);
    };
    // oneDNN's BatchNorm and max-pooling passes on tensors in `tag` (constant data: the values do not change the time).
    struct Timed {
        double bn_fwd, bn_bwd, pool_fwd, pool_bwd;
    };
    const auto onednn_passes = [&](const Shape4& s, memory::format_tag tag) {
        const memory::desc md({s.N, s.C, s.H, s.W}, memory::data_type::f32, tag);
        const memory::desc pmd({s.N, s.C, s.H / 2, s.W / 2}, memory::data_type::f32, tag);
        const memory::desc cd({s.C}, memory::data_type::f32, memory::format_tag::a);
        const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
        const dnnl::batch_normalization_forward::primitive_desc fpd(
            dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, md, 1e-5f, flags), eng);
        const dnnl::batch_normalization_backward::primitive_desc bpd(
            dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, md, md, 1e-5f, flags), eng, fpd);
        memory x(md, eng), y(md, eng), dy(md, eng), dx(md, eng), mean(fpd.mean_desc(), eng),
            var(fpd.variance_desc(), eng), sc(cd, eng), sh(cd, eng), dsc(cd, eng), dsh(cd, eng);
        for (memory* m : {&x, &y, &dy})
            std::fill_n(static_cast<float*>(m->get_data_handle()), m->get_desc().get_size() / 4, 0.5f);
        std::fill_n(static_cast<float*>(sc.get_data_handle()), s.C, 1.0f);
        dnnl::batch_normalization_forward f(fpd);
        dnnl::batch_normalization_backward b(bpd);
        Timed t{};
        t.bn_fwd = best_ms([&] {
            f.execute(st, {{DNNL_ARG_SRC, x}, {DNNL_ARG_DST, y}, {DNNL_ARG_MEAN, mean}, {DNNL_ARG_VARIANCE, var},
                           {DNNL_ARG_SCALE, sc}, {DNNL_ARG_SHIFT, sh}});
            st.wait();
        });
        t.bn_bwd = best_ms([&] {
            b.execute(st, {{DNNL_ARG_SRC, x}, {DNNL_ARG_MEAN, mean}, {DNNL_ARG_VARIANCE, var}, {DNNL_ARG_DIFF_DST, dy},
                           {DNNL_ARG_SCALE, sc}, {DNNL_ARG_SHIFT, sh}, {DNNL_ARG_DST, y}, {DNNL_ARG_DIFF_SRC, dx},
                           {DNNL_ARG_DIFF_SCALE, dsc}, {DNNL_ARG_DIFF_SHIFT, dsh}});
            st.wait();
        });
        const dnnl::pooling_forward::primitive_desc pf(
            dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max, md, pmd,
                                        {2, 2}, {2, 2}, {0, 0}, {0, 0}),
            eng);
        const dnnl::pooling_backward::primitive_desc pb(
            dnnl::pooling_backward::desc(dnnl::algorithm::pooling_max, md, pmd, {2, 2}, {2, 2}, {0, 0}, {0, 0}), eng,
            pf);
        memory py(pmd, eng), pdy(pmd, eng), ws(pf.workspace_desc(), eng);
        dnnl::pooling_forward pfw(pf);
        dnnl::pooling_backward pbw(pb);
        t.pool_fwd = best_ms([&] {
            pfw.execute(st, {{DNNL_ARG_SRC, x}, {DNNL_ARG_DST, py}, {DNNL_ARG_WORKSPACE, ws}});
            st.wait();
        });
        t.pool_bwd = best_ms([&] {
            pbw.execute(st, {{DNNL_ARG_DIFF_DST, pdy}, {DNNL_ARG_DIFF_SRC, dx}, {DNNL_ARG_WORKSPACE, ws}});
            st.wait();
        });
        return t;
    };
    for (const Shape4& s : shapes) {
        const Timed plain = onednn_passes(s, memory::format_tag::nchw);
        const Timed b16 = onednn_passes(s, memory::format_tag::nChw16c);
        const double bytes = 4.0 * static_cast<double>(s.N * s.C * s.H * s.W);
        Tensor x({s.N, s.C, s.H, s.W}), y(x.shape()), dy(x.shape()), dx(x.shape());
        for (int64_t i = 0; i < x.numel(); ++i) {
            x.data()[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
            dy.data()[i] = static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f;
        }
        Tensor gamma({s.C}), beta({s.C}), mean({s.C}), inv_std({s.C}), rmean({s.C}), rvar({s.C}), dg({s.C}), db({s.C});
        gamma.fill(1.0f);
        beta.fill(0.0f);
        rvar.fill(1.0f);
        const ops::BatchNormParams bp;
        const double bn_fwd_ours =
            best_ms([&] { ops::batchnorm_forward(x, gamma, beta, y, mean, inv_std, rmean, rvar, bp); });
        const double bn_bwd_ours =
            best_ms([&] { ops::batchnorm_backward(x, dy, gamma, mean, inv_std, dx, dg, db, true); });

        // At least: forward reads x for the statistics, reads it again and writes y; backward reads x and dy for
        // the sums, reads them again and writes dx.
        row(s.name, "bn forward", bn_fwd_ours, plain.bn_fwd, b16.bn_fwd, 3 * bytes);
        row(s.name, "bn backward", bn_bwd_ours, plain.bn_bwd, b16.bn_bwd, 5 * bytes);

        const ops::Pool2dParams pp;
        Tensor py(ops::pool2d_output_shape(x.shape(), pp)), pdy(py.shape());
        pdy.fill(0.25f);
        const double pool_fwd_ours = best_ms([&] { ops::maxpool2d_forward(x, py, pp); });
        const double pool_bwd_ours = best_ms([&] { ops::maxpool2d_backward(x, py, pdy, dx, pp); });
        // At least: forward reads x and writes a quarter; backward writes dx (and reads a quarter, dy; ours also
        // reads x and y to find each window's maximum, oneDNN its workspace).
        row(s.name, "pool forward", pool_fwd_ours, plain.pool_fwd, b16.pool_fwd, 1.25 * bytes);
        row(s.name, "pool backward", pool_bwd_ours, plain.pool_bwd, b16.pool_bwd, 1.25 * bytes);
    }
    std::printf("ratio > 1: oneDNN faster (both NCHW); GB/s: the least bytes the pass must move over our time; oneDNN "
                "blocked: the same pass with nChw16c tensors (what keeping blocked layouts between layers would run, "
                "without the reorders into and out of them)\n");
    return 0;
}
