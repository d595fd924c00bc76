// Tools to damage or rewrite ringtrain checkpoints (format 2) on purpose, for the integrity tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "ringtrain/core/crc32c.hpp"

namespace rt_test {

struct CheckpointBytes {
    std::string bytes;  // the whole file
    uint64_t header_len = 0;
    nlohmann::json header;
    uint64_t data_offset() const { return 16 + header_len; }
};

inline CheckpointBytes read_checkpoint_bytes(const std::string& path) {
    CheckpointBytes c;
    std::ifstream in(path, std::ios::binary);
    c.bytes.assign(std::istreambuf_iterator<char>(in), {});
    std::memcpy(&c.header_len, c.bytes.data() + 8, 8);
    c.header = nlohmann::json::parse(c.bytes.substr(16, c.header_len));
    return c;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

inline void flip_bit(const std::string& path, uint64_t offset, int bit) {
    CheckpointBytes c = read_checkpoint_bytes(path);
    c.bytes[offset] = static_cast<char>(c.bytes[offset] ^ (1 << bit));
    write_bytes(path, c.bytes);
}

// Replaces the header by `text` and recomputes the header checksum, keeping the tensor data: a crafted file that
// passes the checksum, so only the reader's own checks stand between it and the run.
inline void replace_header(const std::string& path, const std::string& text) {
    const CheckpointBytes c = read_checkpoint_bytes(path);
    const std::string data = c.bytes.substr(c.data_offset(), c.bytes.size() - c.data_offset() - 4);
    std::string out = c.bytes.substr(0, 8);
    const uint64_t len = text.size();
    out.append(reinterpret_cast<const char*>(&len), 8);
    out += text;
    const uint32_t crc = ringtrain::crc32c(std::as_bytes(std::span<const char>(out.data(), out.size())));
    out += data;
    out.append(reinterpret_cast<const char*>(&crc), 4);
    write_bytes(path, out);
}

}  // namespace rt_test
