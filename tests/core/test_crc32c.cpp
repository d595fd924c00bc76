#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "ringtrain/core/crc32c.hpp"

using namespace ringtrain;

namespace {
uint32_t crc_of(const std::string& s, uint32_t crc = 0) { return crc32c(std::as_bytes(std::span(s.data(), s.size())), crc); }
}  // namespace

// Check values from RFC 3720 (iSCSI) appendix B.4 and the CRC catalogue's "123456789".
TEST_CASE("crc32c matches the published check values", "[core][crc32c]") {
    CHECK(crc_of("") == 0u);
    CHECK(crc_of("123456789") == 0xE3069283u);
    CHECK(crc_of(std::string(32, '\0')) == 0x8A9136AAu);
    CHECK(crc_of(std::string(32, '\xFF')) == 0x62A8AB43u);
    std::string up(32, '\0'), down(32, '\0');
    for (int i = 0; i < 32; ++i) {
        up[i] = static_cast<char>(i);
        down[i] = static_cast<char>(31 - i);
    }
    CHECK(crc_of(up) == 0x46DD794Eu);
    CHECK(crc_of(down) == 0x113FDB5Cu);
}

TEST_CASE("crc32c continues across pieces and sees every single-bit flip", "[core][crc32c]") {
    std::string text;
    for (int i = 0; i < 1000; ++i) text += static_cast<char>((i * 131 + 7) & 0xFF);
    const uint32_t whole = crc_of(text);
    // Every split point, so the 8-byte loop and the byte tail are both crossed at every alignment.
    for (size_t cut = 0; cut <= 40; ++cut) REQUIRE(crc_of(text.substr(cut), crc_of(text.substr(0, cut))) == whole);
    for (size_t bit = 0; bit < 8 * 64; ++bit) {
        std::string flipped = text;
        flipped[bit / 8] = static_cast<char>(flipped[bit / 8] ^ (1 << (bit % 8)));
        REQUIRE(crc_of(flipped) != whole);
    }
}
