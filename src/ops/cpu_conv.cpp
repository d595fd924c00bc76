// The CPU convolution choice (ops/cpu_conv.hpp) and the rule behind `auto`.
#include "ringtrain/ops/cpu_conv.hpp"

#include <atomic>

#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/threads.hpp"
#ifdef RINGTRAIN_WITH_ONEDNN
#include "cpu/onednn_conv.hpp"
#endif

namespace ringtrain::ops {

namespace {
std::atomic<CpuConv> g_choice{CpuConv::Auto};
}

bool onednn_available() {
#ifdef RINGTRAIN_WITH_ONEDNN
    return true;
#else
    return false;
#endif
}

CpuConv cpu_conv_auto_choice() {
#ifdef RINGTRAIN_WITH_ONEDNN
    // AUTO_RULE_PLACEHOLDER
    return cpu::onednn::has_avx512() ? CpuConv::OneDnn : CpuConv::Im2col;
#else
    return CpuConv::Im2col;
#endif
}

void set_cpu_conv(CpuConv c) {
    if (c == CpuConv::OneDnn && !onednn_available())
        throw InputError("train.cpu_conv is \"onednn\" but this build has no oneDNN: install libdnnl-dev and rebuild, "
                         "or set train.cpu_conv to \"auto\" or \"im2col\"");
    g_choice.store(c);
}

CpuConv cpu_conv() {
    const CpuConv c = g_choice.load(std::memory_order_relaxed);
    return c == CpuConv::Auto ? cpu_conv_auto_choice() : c;
}

std::string cpu_conv_description() {
    const std::string im2col = "im2col + " + cpu_gemm_library();
#ifdef RINGTRAIN_WITH_ONEDNN
    return cpu_conv() == CpuConv::OneDnn ? cpu::onednn::description() : im2col;
#else
    return im2col + " (built without oneDNN)";
#endif
}

}  // namespace ringtrain::ops
