#include "ringtrain/core/crc32c.hpp"

#include <array>
#include <cstring>

namespace ringtrain {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed

// Slicing-by-8 (Kounavis and Berry, 2005): table k holds the CRC of a byte followed by k zero bytes, so eight
// input bytes fold into the state with eight look-ups instead of eight dependent steps.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
    Tables t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
        for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFFu];
    return t;
}

constexpr Tables kTables = make_tables();

}  // namespace

uint32_t crc32c(std::span<const std::byte> bytes, uint32_t crc) {
    const auto& t = kTables;
    uint32_t c = ~crc;
    const std::byte* p = bytes.data();
    size_t n = bytes.size();
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t lo, hi;
        std::memcpy(&lo, p, 4);  // little-endian hosts only, like the checkpoint format itself
        std::memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = t[7][lo & 0xFFu] ^ t[6][(lo >> 8) & 0xFFu] ^ t[5][(lo >> 16) & 0xFFu] ^ t[4][lo >> 24] ^
            t[3][hi & 0xFFu] ^ t[2][(hi >> 8) & 0xFFu] ^ t[1][(hi >> 16) & 0xFFu] ^ t[0][hi >> 24];
    }
    for (; n > 0; ++p, --n) c = (c >> 8) ^ t[0][(c ^ std::to_integer<uint32_t>(*p)) & 0xFFu];
    return ~c;
}

}  // namespace ringtrain
