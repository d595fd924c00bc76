// Tools to damage or rewrite ringtrain checkpoints (format 2) on purpose, for the integrity tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

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

// Every tensor of a checkpoint by name (the model's, the optimizer's, and local SGD's per-rank copies "rank<R>/...").
inline std::map<std::string, std::vector<float>> checkpoint_tensor_values(const std::string& path) {
    const CheckpointBytes c = read_checkpoint_bytes(path);
    std::map<std::string, std::vector<float>> out;
    uint64_t at = c.data_offset();
    for (const auto& t : c.header["tensors"]) {
        size_t n = 1;
        for (const auto& d : t["shape"]) n *= d.get<size_t>();
        std::vector<float> v(n);
        std::memcpy(v.data(), c.bytes.data() + at, n * 4);
        at += n * 4;
        out[t["name"].get<std::string>()] = std::move(v);
    }
    return out;
}

// Rewrites a checkpoint with local SGD's per-rank copies into the layout written before them: the model's and the
// optimizer's tensors only, no "rank_copies" key, no extra.local_sgd_last_average_step. Checksums recomputed.
inline void strip_rank_copies(const std::string& path) {
    const CheckpointBytes c = read_checkpoint_bytes(path);
    nlohmann::json header = c.header;
    nlohmann::json kept = nlohmann::json::array();
    uint64_t data_bytes = 0;
    for (const auto& t : header["tensors"]) {
        if (t["name"].get<std::string>().rfind("rank0/", 0) == 0) break;  // the copies follow the run's own tensors
        size_t n = 1;
        for (const auto& d : t["shape"]) n *= d.get<size_t>();
        data_bytes += n * 4;
        kept.push_back(t);
    }
    header["tensors"] = kept;
    header.erase("rank_copies");
    header["extra"].erase("local_sgd_last_average_step");
    const std::string text = header.dump();
    std::string out = c.bytes.substr(0, 8);
    const uint64_t len = text.size();
    out.append(reinterpret_cast<const char*>(&len), 8);
    out += text;
    const uint32_t crc = ringtrain::crc32c(std::as_bytes(std::span<const char>(out.data(), out.size())));
    out += c.bytes.substr(c.data_offset(), data_bytes);
    out.append(reinterpret_cast<const char*>(&crc), 4);
    write_bytes(path, out);
}

}  // namespace rt_test
