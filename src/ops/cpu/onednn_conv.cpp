// CPU convolutions through oneDNN, the library PyTorch's CPU convolutions run on: forward with fused bias,
// backward data, backward weights with the bias gradient.
//
// Per call site (a layer's Workspace) and shape, one Entry holds the primitive descriptors, the primitives, the
// reorders and every buffer they need, all made on first use and reused each step: a step creates no primitive and
// allocates nothing. The caller's tensors stay plain NCHW / KCRS; oneDNN picks its layouts (format "any"), and where
// it picks a blocked one (nChw8c on AVX2) a reorder into and out of a buffer kept in the Entry surrounds the call,
// as PyTorch 1.13 does around the same primitives.
#include "onednn_conv.hpp"

#include <dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace ringtrain::ops::cpu::onednn {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// One CPU engine per process is how oneDNN is meant to be used (primitives are bound to it); streams are per thread
// so that two threads (tests, an evaluation helper) never share one.
dnnl::engine& engine() {
    static dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}
dnnl::stream& stream() {
    thread_local dnnl::stream s(engine());
    return s;
}


// A caller's plain tensor as the primitive sees it: `user` wraps the caller's pointer (set per call); `inner` is what
// the primitive reads or writes — the same memory, or a buffer in oneDNN's preferred layout with a reorder between.
struct Bound {
    memory user, inner;
    std::optional<dnnl::reorder> to_inner, to_user;

    Bound() = default;
    Bound(const memory::desc& plain, const memory::desc& wanted, bool input) {
        user = memory(plain, engine(), DNNL_MEMORY_NONE);
        if (wanted == plain) {
            inner = user;
        } else {
            inner = memory(wanted, engine());
            if (input) to_inner.emplace(user, inner);
            else to_user.emplace(inner, user);
        }
    }
    void set(const float* p) { user.set_data_handle(const_cast<float*>(p)); }
    void before() {
        if (to_inner) to_inner->execute(stream(), user, inner);
    }
    void after() {
        if (to_user) to_user->execute(stream(), inner, user);
    }
};

struct Key {
    std::array<int64_t, 12> shape{};
    std::array<int64_t, 4> params{};
    bool operator==(const Key&) const = default;
};

struct KeyHash {
    size_t operator()(const Key& k) const {
        size_t h = 1469598103934665603ull;
        for (int64_t v : k.shape) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
        for (int64_t v : k.params) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
        return h;
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
    return k;
}

// Each primitive's scratch memory, kept in the entry (user scratchpad mode), so a step allocates nothing.
memory scratch_for(const memory::desc& d) { return memory(d, engine()); }

dnnl::primitive_attr user_scratchpad() {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return a;
}

struct Entry {
    size_t* made;  // the cache's count of primitives created
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
    std::optional<Forward> fwd[2];              // [with bias]
    std::optional<BackwardData> bwd_data;
    std::optional<BackwardWeights> bwd_weights[2];  // [with bias gradient]

    Entry(size_t* made_count, const Shape& x, const Shape& w, const Shape& y, const Conv2dParams& p)
        : made(made_count),
          x_md({x.begin(), x.end()}, dt::f32, tag::nchw),
          w_md({w.begin(), w.end()}, dt::f32, tag::oihw),
          y_md({y.begin(), y.end()}, dt::f32, tag::nchw),
          b_md({w[0]}, dt::f32, tag::a),
          strides{p.stride_h, p.stride_w},
          pad_l{p.pad_h, p.pad_w},
          // The right padding that makes oneDNN's output size ours: (in + pl + pr - k) / stride + 1 == out.
          pad_r{(y[2] - 1) * p.stride_h + w[2] - x[2] - p.pad_h, (y[3] - 1) * p.stride_w + w[3] - x[3] - p.pad_w} {}

    memory::desc any(const memory::desc& plain) const { return memory::desc(plain.dims(), dt::f32, tag::any); }

    Forward& forward(bool bias) {
        auto& f = fwd[bias];
        if (!f) {
            const auto d = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                                  dnnl::algorithm::convolution_direct, any(x_md),
                                                                  any(w_md), b_md, any(y_md), strides, pad_l, pad_r)
                                : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                                  dnnl::algorithm::convolution_direct, any(x_md),
                                                                  any(w_md), any(y_md), strides, pad_l, pad_r);
            const dnnl::convolution_forward::primitive_desc pd(d, user_scratchpad(), engine());
            ++*made;
            f.emplace(Forward{pd, dnnl::convolution_forward(pd), Bound(x_md, pd.src_desc(), true),
                              Bound(w_md, pd.weights_desc(), true), Bound(y_md, pd.dst_desc(), false),
                              memory(b_md, engine(), DNNL_MEMORY_NONE), scratch_for(pd.scratchpad_desc())});
        }
        return *f;
    }
    // The forward a backward primitive is made to match (oneDNN's "hint"): the one the layer runs.
    const dnnl::convolution_forward::primitive_desc& hint() { return fwd[1] ? fwd[1]->pd : forward(false).pd; }

    BackwardData& backward_data() {
        if (!bwd_data) {
            const dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, any(x_md), any(w_md),
                                                          any(y_md), strides, pad_l, pad_r);
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
                                                                           any(x_md), any(w_md), b_md, any(y_md),
                                                                           strides, pad_l, pad_r)
                                : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                                           any(x_md), any(w_md), any(y_md), strides,
                                                                           pad_l, pad_r);
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

// The entries of one call site: usually one shape (training batch), a second for evaluation or a last short batch.
// Capped so that a caller cycling through many shapes cannot grow it without bound.
struct ConvCache : WorkspaceCache {
    std::unordered_map<Key, std::unique_ptr<Entry>, KeyHash> entries;
    size_t primitives_made = 0;
};
constexpr size_t kMaxEntries = 8;

Entry& entry(Workspace& ws, const Shape& x, const Shape& w, const Shape& y, const Conv2dParams& p) {
    auto* cache = dynamic_cast<ConvCache*>(ws.backend_cache().get());
    if (cache == nullptr) {
        ws.backend_cache() = std::make_unique<ConvCache>();
        cache = static_cast<ConvCache*>(ws.backend_cache().get());
    }
    const Key k = key_of(x, w, y, p);
    auto it = cache->entries.find(k);
    if (it != cache->entries.end()) return *it->second;
    if (cache->entries.size() >= kMaxEntries) cache->entries.clear();
    return *cache->entries.emplace(k, std::make_unique<Entry>(&cache->primitives_made, x, w, y, p)).first->second;
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
                    Workspace& ws) {
    const bool has_bias = !bias.empty();
    auto& f = entry(ws, x.shape(), w.shape(), y.shape(), p).forward(has_bias);
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

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p, Workspace& ws) {
    auto& b = entry(ws, dx.shape(), w.shape(), dy.shape(), p).backward_data();
    b.dy.set(dy.data());
    b.w.set(w.data());
    b.dx.set(dx.data());
    b.dy.before();
    b.w.before();
    b.prim.execute(stream(), {{DNNL_ARG_DIFF_DST, b.dy.inner},
                              {DNNL_ARG_WEIGHTS, b.w.inner},
                              {DNNL_ARG_DIFF_SRC, b.dx.inner},
                              {DNNL_ARG_SCRATCHPAD, b.scratch}});
    b.dx.after();
    stream().wait();
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
