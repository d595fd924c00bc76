// Private to src/ops: the oneDNN engine and streams every oneDNN primitive here runs on, and a caller's tensor bound
// to a primitive. One CPU engine per process is how oneDNN is meant to be used (primitives are bound to it); streams
// are per thread so that two threads (tests, an evaluation helper) never share one.
#pragma once

#include <dnnl.hpp>

#include <optional>

namespace ringtrain::ops::cpu::onednn {

inline dnnl::engine& engine() {
    static dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}

inline dnnl::stream& stream() {
    thread_local dnnl::stream s(engine());
    return s;
}

// A caller's plain tensor as the primitive sees it: `user` wraps the caller's pointer (set per call); `inner` is what
// the primitive reads or writes — the same memory, or a buffer in oneDNN's preferred layout (or data type: bf16) with a
// reorder between, which converts.
struct Bound {
    dnnl::memory user, inner;
    std::optional<dnnl::reorder> to_inner, to_user;

    Bound() = default;
    Bound(const dnnl::memory::desc& plain, const dnnl::memory::desc& wanted, bool input) {
        user = dnnl::memory(plain, engine(), DNNL_MEMORY_NONE);
        if (wanted == plain) {
            inner = user;
        } else {
            inner = dnnl::memory(wanted, engine());
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

}  // namespace ringtrain::ops::cpu::onednn
