// cpu_relax: the pause a polling loop makes between two looks at a flag another core writes (x86 PAUSE, Arm YIELD):
// it saves power and frees the sibling hyperthread, and leaves the loop without a memory-order mis-speculation.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ringtrain {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

}  // namespace ringtrain
