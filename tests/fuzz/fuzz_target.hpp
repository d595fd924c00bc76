// What every fuzz target provides, in both modes (see CMakeLists.txt): libFuzzer's entry point, and the seed inputs
// the standalone driver mutates (libFuzzer takes its seeds from a corpus folder; `--write-seeds DIR` writes these).
// The property every target checks: any input ends in success or an InputError (exit 2 with a message), never a
// crash, a hang, an out-of-memory or another exception.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "support/temp_dir.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
std::vector<std::string> ringtrain_fuzz_seeds();

namespace rt_fuzz {

// The input as a file (every reader under test reads files): one per process, rewritten per input.
inline std::string as_file(const uint8_t* data, size_t size, const char* suffix) {
    static const std::string path = [suffix] {
        const auto p = std::filesystem::temp_directory_path() / ("ringtrain-fuzz-" + std::to_string(::getpid()) + suffix);
        rt_test::ExitCleanup::instance().add(p);  // removed when the driver exits
        return p.string();
    }();
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                   static_cast<std::streamsize>(size));
    return path;
}

// Runs `f`; an InputError is the expected answer to bad input. Anything else escapes and fails the run (the
// standalone driver reports it with the input that caused it; libFuzzer aborts and saves the crash input).
template <class F>
int expect_clean(F&& f) {
    try {
        f();
    } catch (const ringtrain::InputError&) {
    }
    return 0;
}

inline std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace rt_fuzz
