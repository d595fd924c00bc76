// Private to src/ops: the oneDNN engine and streams every oneDNN primitive here runs on. One CPU engine per process
// is how oneDNN is meant to be used (primitives are bound to it); streams are per thread so that two threads (tests,
// an evaluation helper) never share one.
#pragma once

#include <dnnl.hpp>

namespace ringtrain::ops::cpu::onednn {

inline dnnl::engine& engine() {
    static dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}

inline dnnl::stream& stream() {
    thread_local dnnl::stream s(engine());
    return s;
}

}  // namespace ringtrain::ops::cpu::onednn
