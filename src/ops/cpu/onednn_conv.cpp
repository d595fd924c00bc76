// CPU convolutions through oneDNN, the library PyTorch's CPU convolutions run on: forward with fused bias,
// backward data, backward weights with the bias gradient.
//
// Per call site (a layer's Workspace) and shape, one Entry holds the primitive descriptors, the primitives, the
// reorders and every buffer they need, all made on first use and reused each step: a step creates no primitive and
// allocates nothing. The caller's tensors stay plain NCHW / KCRS; oneDNN picks its layouts (format "any"), and where
// it picks a blocked one (nChw8c on AVX2) a reorder into and out of a buffer kept in the Entry surrounds the call,
// as PyTorch 1.13 does around the same primitives.
//
// With bf16 (ops::conv_runs_bf16) the primitive reads bfloat16 input, weights and output gradient and writes float32
// (output, input gradient, weight and bias gradients): the reorders into its layout also convert, so the caller's
// tensors stay float32 and a bf16 step costs no extra pass.
#include "onednn_conv.hpp"

#include <dnnl.hpp>

#include "onednn_cache.hpp"
#include "onednn_engine.hpp"

#ifdef __AVX__
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ringtrain/ops/cpu_conv.hpp"

namespace ringtrain::ops::cpu::onednn {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Key {
    std::array<int64_t, 12> shape{};
    std::array<int64_t, 4> params{};
    bool bf16 = false;
    bool operator==(const Key&) const = default;
};

struct KeyHash {
    size_t operator()(const Key& k) const {
        size_t h = kHashSeed;
        for (int64_t v : k.shape) h = hash_mix(h, v);
        for (int64_t v : k.params) h = hash_mix(h, v);
        return hash_mix(h, k.bf16);
    }
};

Key key_of(const Shape& x, const Shape& w, const Shape& y, const Conv2dParams& p) {
    Key k;
    for (int i = 0; i < 4; ++i) {
        k.shape[i] = x[i];
        k.shape[4 + i] = w[i];
        k.shape[8 + i] = y[i];
    }
    k.params = {p.stride_h, p.stride_w, p.pad_h, p.pad_w};
    k.bf16 = ops::conv_runs_bf16(x);
    return k;
}

// Each primitive's scratch memory, kept in the entry (user scratchpad mode), so a step allocates nothing.
memory scratch_for(const memory::desc& d) { return memory(d, engine()); }

dnnl::primitive_attr user_scratchpad(bool relu = false) {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (relu) {  // max(v, 0) on the result, written while it is still in registers
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        a.set_post_ops(ops);
    }
    return a;
}

// out[n, c, h, w] = in (oneDNN's nChw8c: [N][C/8][H][W][8]) where mask[n, c, h, w] > 0, else 0: the copy out of the
// blocked layout and a ReLU's backward in one pass. Branch-free (the mask is data, about half zeros) and, with AVX,
// by 8x8 transposes: a per-element strided copy with a branch measured 4-5x slower than oneDNN's own reorder.
inline float masked(float m, float v) { return m > 0.0f ? v : 0.0f; }

#ifdef __AVX__
// Rows r[i] = 8 channels at position i -> r[c] = 8 positions of channel c.
inline void transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
#endif

void unblock8_masked(const float* in, const float* mask, float* out, const memory::dims& d) {
    const int64_t N = d[0], C = d[1], HW = d[2] * d[3], blocks = (C + 7) / 8;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t cb = 0; cb < blocks; ++cb) {
            const float* src = in + (n * blocks + cb) * HW * 8;
            const int64_t first = n * C + cb * 8, channels = std::min<int64_t>(8, C - cb * 8);
            int64_t i = 0;
#ifdef __AVX__
            if (channels == 8) {
                const __m256 zero = _mm256_setzero_ps();
                for (; i + 8 <= HW; i += 8) {
                    __m256 r[8];
                    for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + (i + k) * 8);
                    transpose8(r);
                    for (int c = 0; c < 8; ++c) {
                        const int64_t off = (first + c) * HW + i;
                        const __m256 keep = _mm256_cmp_ps(_mm256_loadu_ps(mask + off), zero, _CMP_GT_OQ);
                        _mm256_storeu_ps(out + off, _mm256_and_ps(keep, r[c]));
                    }
                }
            }
#endif
            for (int64_t c = 0; c < channels; ++c) {
                const int64_t off = (first + c) * HW;
                for (int64_t j = i; j < HW; ++j) out[off + j] = masked(mask[off + j], src[j * 8 + c]);
            }
        }
}

struct Entry {
    size_t* made;  // the cache's count of primitives created
    bool bf16;     // input, weights and output gradient read as bfloat16
    memory::desc x_md, w_md, y_md, b_md;
    memory::dims strides, pad_l, pad_r;

    struct Forward {
        dnnl::convolution_forward::primitive_desc pd;
        dnnl::convolution_forward prim;
        Bound x, w, y;
        memory b, scratch;
    };
    struct BackwardData {
        dnnl::convolution_backward_data prim;
        Bound dy, w, dx;
        memory scratch;
    };
    struct BackwardWeights {
        dnnl::convolution_backward_weights prim;
        Bound x, dy, dw;
        memory db, scratch;
        std::vector<float> dw_acc, db_acc;  // results when the caller accumulates into its gradients
    };
    std::optional<Forward> fwd[2][2];           // [with bias][with ReLU]
    std::optional<BackwardData> bwd_data;
    std::optional<BackwardWeights> bwd_weights[2];  // [with bias gradient]

    Entry(size_t* made_count, bool low_precision, const Shape& x, const Shape& w, const Shape& y,
          const Conv2dParams& p)
        : made(made_count),
          bf16(low_precision),
          x_md({x.begin(), x.end()}, dt::f32, tag::nchw),
          w_md({w.begin(), w.end()}, dt::f32, tag::oihw),
          y_md({y.begin(), y.end()}, dt::f32, tag::nchw),
          b_md({w[0]}, dt::f32, tag::a),
          strides{p.stride_h, p.stride_w},
          pad_l{p.pad_h, p.pad_w},
          // The right padding that makes oneDNN's output size ours: (in + pl + pr - k) / stride + 1 == out.
          pad_r{(y[2] - 1) * p.stride_h + w[2] - x[2] - p.pad_h, (y[3] - 1) * p.stride_w + w[3] - x[3] - p.pad_w} {}

    memory::desc any(const memory::desc& plain) const { return memory::desc(plain.dims(), dt::f32, tag::any); }
    // An operand the primitive only reads: bfloat16 in a bf16 entry.
    memory::desc read_any(const memory::desc& plain) const {
        return memory::desc(plain.dims(), bf16 ? dt::bf16 : dt::f32, tag::any);
    }

    Forward& forward(bool bias, bool relu) {
        auto& f = fwd[bias][relu];
        if (!f) {
            const auto d = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                                  dnnl::algorithm::convolution_direct, read_any(x_md),
                                                                  read_any(w_md), b_md, any(y_md), strides, pad_l,
                                                                  pad_r)
                                : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                                  dnnl::algorithm::convolution_direct, read_any(x_md),
                                                                  read_any(w_md), any(y_md), strides, pad_l, pad_r);
            const dnnl::convolution_forward::primitive_desc pd(d, user_scratchpad(relu), engine());
            ++*made;
            f.emplace(Forward{pd, dnnl::convolution_forward(pd), Bound(x_md, pd.src_desc(), true),
                              Bound(w_md, pd.weights_desc(), true), Bound(y_md, pd.dst_desc(), false),
                              memory(b_md, engine(), DNNL_MEMORY_NONE), scratch_for(pd.scratchpad_desc())});
        }
        return *f;
    }
    // The forward a backward primitive is made to match (oneDNN's "hint"): one the layer runs.
    const dnnl::convolution_forward::primitive_desc& hint() {
        for (auto& by_bias : fwd)
            for (auto& f : by_bias)
                if (f) return f->pd;
        return forward(false, false).pd;
    }

    BackwardData& backward_data() {
        if (!bwd_data) {
            const dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, any(x_md),
                                                          read_any(w_md), read_any(y_md), strides, pad_l, pad_r);
            const dnnl::convolution_backward_data::primitive_desc pd(d, user_scratchpad(), engine(), hint());
            ++*made;
            bwd_data.emplace(BackwardData{dnnl::convolution_backward_data(pd), Bound(y_md, pd.diff_dst_desc(), true),
                                          Bound(w_md, pd.weights_desc(), true),
                                          Bound(x_md, pd.diff_src_desc(), false),
                                          scratch_for(pd.scratchpad_desc())});
        }
        return *bwd_data;
    }

    BackwardWeights& backward_weights(bool bias) {
        auto& b = bwd_weights[bias];
        if (!b) {
            const auto d = bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                                           read_any(x_md), any(w_md), b_md,
                                                                           read_any(y_md), strides, pad_l, pad_r)
                                : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                                           read_any(x_md), any(w_md), read_any(y_md),
                                                                           strides, pad_l, pad_r);
            const dnnl::convolution_backward_weights::primitive_desc pd(d, user_scratchpad(), engine(), hint());
            ++*made;
            b.emplace(BackwardWeights{dnnl::convolution_backward_weights(pd), Bound(x_md, pd.src_desc(), true),
                                      Bound(y_md, pd.diff_dst_desc(), true), Bound(w_md, pd.diff_weights_desc(), false),
                                      memory(b_md, engine(), DNNL_MEMORY_NONE), scratch_for(pd.scratchpad_desc()),
                                      {}, {}});
        }
        return *b;
    }
};

// One call site's entries (onednn_cache.hpp): usually one shape, a second for evaluation or a last short batch.
using ConvCache = EntryCache<Key, Entry, KeyHash, 8>;

Entry& entry(Workspace& ws, const Shape& x, const Shape& w, const Shape& y, const Conv2dParams& p) {
    ConvCache& cache = ConvCache::in(ws);
    const Key k = key_of(x, w, y, p);
    return cache.get(k, [&] { return std::make_unique<Entry>(&cache.primitives_made, k.bf16, x, w, y, p); });
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
                    Workspace& ws, bool relu) {
    const bool has_bias = !bias.empty();
    auto& f = entry(ws, x.shape(), w.shape(), y.shape(), p).forward(has_bias, relu);
    f.x.set(x.data());
    f.w.set(w.data());
    f.y.set(y.data());
    f.x.before();
    f.w.before();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, f.x.inner},
                                         {DNNL_ARG_WEIGHTS, f.w.inner},
                                         {DNNL_ARG_DST, f.y.inner},
                                         {DNNL_ARG_SCRATCHPAD, f.scratch}};
    if (has_bias) {
        f.b.set_data_handle(const_cast<float*>(bias.data()));
        args.emplace(DNNL_ARG_BIAS, f.b);
    }
    f.prim.execute(stream(), args);
    f.y.after();
    stream().wait();
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p, Workspace& ws,
                          const Tensor* relu_x) {
    auto& e = entry(ws, dx.shape(), w.shape(), dy.shape(), p);
    auto& b = e.backward_data();
    b.dy.set(dy.data());
    b.w.set(w.data());
    b.dx.set(dx.data());
    b.dy.before();
    b.w.before();
    b.prim.execute(stream(), {{DNNL_ARG_DIFF_DST, b.dy.inner},
                              {DNNL_ARG_WEIGHTS, b.w.inner},
                              {DNNL_ARG_DIFF_SRC, b.dx.inner},
                              {DNNL_ARG_SCRATCHPAD, b.scratch}});
    if (relu_x && b.dx.to_user && b.dx.inner.get_desc() == memory::desc(e.x_md.dims(), dt::f32, tag::nChw8c)) {
        stream().wait();
        unblock8_masked(static_cast<const float*>(b.dx.inner.get_data_handle()), relu_x->data(), dx.data(),
                        e.x_md.dims());
        return;
    }
    b.dx.after();
    stream().wait();
    if (relu_x) {  // another layout: the mask as its own pass
        const float* m = relu_x->data();
        float* d = dx.data();
        for (int64_t i = 0, n = dx.numel(); i < n; ++i) d[i] = m[i] > 0.0f ? d[i] : 0.0f;
    }
}

void conv2d_backward_filter(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias, const Conv2dParams& p,
                            Workspace& ws, bool accumulate) {
    const bool bias = !dbias.empty();
    auto& b = entry(ws, x.shape(), dw.shape(), dy.shape(), p).backward_weights(bias);
    // oneDNN overwrites its outputs; to accumulate, it writes into buffers of the entry that are then added.
    if (accumulate) {
        b.dw_acc.resize(static_cast<size_t>(dw.numel()));
        b.db_acc.resize(static_cast<size_t>(dbias.numel()));
    }
    float* dw_out = accumulate ? b.dw_acc.data() : dw.data();
    float* db_out = accumulate ? b.db_acc.data() : (bias ? dbias.data() : nullptr);
    b.x.set(x.data());
    b.dy.set(dy.data());
    b.dw.set(dw_out);
    b.x.before();
    b.dy.before();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, b.x.inner},
                                         {DNNL_ARG_DIFF_DST, b.dy.inner},
                                         {DNNL_ARG_DIFF_WEIGHTS, b.dw.inner},
                                         {DNNL_ARG_SCRATCHPAD, b.scratch}};
    if (bias) {
        b.db.set_data_handle(db_out);
        args.emplace(DNNL_ARG_DIFF_BIAS, b.db);
    }
    b.prim.execute(stream(), args);
    b.dw.after();
    stream().wait();
    if (accumulate) {
        float* pdw = dw.data();
        for (size_t i = 0; i < b.dw_acc.size(); ++i) pdw[i] += b.dw_acc[i];
        float* pdb = bias ? dbias.data() : nullptr;
        for (size_t i = 0; pdb && i < b.db_acc.size(); ++i) pdb[i] += b.db_acc[i];
    }
}

size_t primitives_made(Workspace& ws) {
    const auto* cache = dynamic_cast<const ConvCache*>(ws.backend_cache().get());
    return cache ? cache->primitives_made : 0;
}

namespace {
bool isa_includes(dnnl::cpu_isa have, dnnl_cpu_isa_t want) {
    return (static_cast<unsigned>(have) & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}
}  // namespace

bool has_avx512() { return isa_includes(dnnl::get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core); }

bool has_bf16() { return isa_includes(dnnl::get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_bf16); }

std::string description() {
    const dnnl_version_t* v = dnnl::version();
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    const char* name = isa_includes(isa, dnnl_cpu_isa_avx512_core_amx)    ? "avx512_core_amx"
                       : isa_includes(isa, dnnl_cpu_isa_avx512_core_bf16) ? "avx512_core_bf16"
                       : isa_includes(isa, dnnl_cpu_isa_avx512_core)      ? "avx512_core"
                       : isa_includes(isa, dnnl_cpu_isa_avx2)             ? "avx2"
                       : isa_includes(isa, dnnl_cpu_isa_avx)              ? "avx"
                                                                          : "sse41";
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
           " (" + name + " jit)";
}

}  // namespace ringtrain::ops::cpu::onednn
