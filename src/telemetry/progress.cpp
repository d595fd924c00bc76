#include "ringtrain/telemetry/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace ringtrain::telemetry {

Progress::Progress(const std::string& mode, bool enabled, int64_t every_steps) : every_(every_steps) {
    enabled_ = enabled && mode != "none";
    bar_ = mode == "bar" || (mode == "auto" && isatty(STDERR_FILENO));
}

void Progress::step(int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double loss, double sps) {
    if (!enabled_) return;
    if (steps <= 0) {  // the epoch's length is not known yet (a streamed file's first pass): no total, no bar
        std::fprintf(stderr, "%sepoch %lld/%lld step %lld loss %.4f %.0f samples/s%s", bar_ ? "\r\033[K" : "",
                     static_cast<long long>(epoch + 1), static_cast<long long>(epochs), static_cast<long long>(step),
                     loss, sps, bar_ ? "" : "\n");
        if (bar_) std::fflush(stderr);
        bar_open_ = bar_;
        return;
    }
    if (bar_) {
        const int width = 30;
        const int filled = steps > 0 ? static_cast<int>(width * step / steps) : width;
        std::fprintf(stderr, "\r\033[Kepoch %lld/%lld [", static_cast<long long>(epoch + 1),
                     static_cast<long long>(epochs));
        for (int i = 0; i < width; ++i) std::fputc(i < filled ? '=' : ' ', stderr);
        std::fprintf(stderr, "] %lld/%lld loss %.4f  %.0f samples/s", static_cast<long long>(step),
                     static_cast<long long>(steps), loss, sps);
        std::fflush(stderr);
        bar_open_ = true;
    } else if (step % every_ == 0 || step == steps) {
        std::fprintf(stderr, "epoch %lld/%lld step %lld/%lld loss %.4f %.0f samples/s\n",
                     static_cast<long long>(epoch + 1), static_cast<long long>(epochs), static_cast<long long>(step),
                     static_cast<long long>(steps), loss, sps);
    }
}

void Progress::line(const std::string& text) {
    if (!enabled_) return;
    if (bar_open_) std::fputc('\n', stderr);
    bar_open_ = false;
    std::fprintf(stderr, "%s\n", text.c_str());
}

void Progress::finish() {
    if (enabled_ && bar_open_) std::fputc('\n', stderr);
    bar_open_ = false;
}

}  // namespace ringtrain::telemetry
