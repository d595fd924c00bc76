// A layer's matrix product through oneDNN's matmul (onednn_matmul.hpp), in bf16 or float32. Per call site and shape
// one Entry holds the primitive, op(a) and op(b) bound to it (a reorder into the layout and type it wants, none where
// the caller's float32 already is that) and the scratchpad: a step creates and allocates nothing.
#include "onednn_matmul.hpp"

#include <dnnl.hpp>

#include <cstdint>
#include <functional>
#include <memory>

#include "onednn_cache.hpp"
#include "onednn_engine.hpp"

namespace ringtrain::ops::cpu::onednn {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Key {
    int64_t m, k, n;
    bool trans_a, trans_b, accumulate, bf16;
    float alpha;
    bool operator==(const Key&) const = default;
};

struct KeyHash {
    size_t operator()(const Key& key) const {
        size_t h = kHashSeed;
        for (int64_t v : {key.m, key.k, key.n, int64_t(key.trans_a), int64_t(key.trans_b), int64_t(key.accumulate),
                          int64_t(key.bf16)})
            h = hash_mix(h, v);
        return h ^ std::hash<float>()(key.alpha);
    }
};

struct Entry {
    dnnl::matmul prim;
    Bound a, b;
    memory c, scratch;

    explicit Entry(const Key& key) {
        // The caller's op(x) as [rows, cols] float32: a transposed operand is the same memory read column-major.
        const memory::desc a_md({key.m, key.k}, dt::f32, key.trans_a ? tag::ba : tag::ab);
        const memory::desc b_md({key.k, key.n}, dt::f32, key.trans_b ? tag::ba : tag::ab);
        const memory::desc c_md({key.m, key.n}, dt::f32, tag::ab);
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
        if (key.accumulate) {  // c = ... + 1 * c, added while the result is in registers
            dnnl::post_ops ops;
            ops.append_sum(1.0f);
            attr.set_post_ops(ops);
        }
        const dt in = key.bf16 ? dt::bf16 : dt::f32;
        const dnnl::matmul::desc d(memory::desc({key.m, key.k}, in, tag::any), memory::desc({key.k, key.n}, in, tag::any),
                                   c_md);
        const dnnl::matmul::primitive_desc pd(d, attr, engine());
        prim = dnnl::matmul(pd);
        a = Bound(a_md, pd.src_desc(), true);
        b = Bound(b_md, pd.weights_desc(), true);
        c = memory(c_md, engine(), DNNL_MEMORY_NONE);
        scratch = memory(pd.scratchpad_desc(), engine());
    }
};

// A layer's call site sees three products (forward, both gradients) at two or three batch sizes (training,
// evaluation, a last short batch).
using MatmulCache = EntryCache<Key, Entry, KeyHash, 12>;

}  // namespace

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta, bool bf16,
          Workspace& ws) {
    const Key key{c.dim(0), trans_a ? a.dim(0) : a.dim(1), c.dim(1), trans_a, trans_b, beta != 0.0f, bf16, alpha};
    Entry& e = MatmulCache::in(ws).get(key, [&] { return std::make_unique<Entry>(key); });
    e.a.set(a.data());
    e.b.set(b.data());
    e.c.set_data_handle(c.data());
    e.a.before();
    e.b.before();
    e.prim.execute(stream(), {{DNNL_ARG_SRC, e.a.inner},
                              {DNNL_ARG_WEIGHTS, e.b.inner},
                              {DNNL_ARG_DST, e.c},
                              {DNNL_ARG_SCRATCHPAD, e.scratch}});
    stream().wait();
}

}  // namespace ringtrain::ops::cpu::onednn
