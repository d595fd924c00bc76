// The TensorBoard writer's encodings against bytes worked out by hand from the protobuf wire format and the TFRecord
// layout, and its file naming (a second file in the same second gets a name of its own). The real files are decoded
// by an independent reader in test_tensorboard.py.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ringtrain/core/crc32c.hpp"
#include "ringtrain/telemetry/tensorboard_writer.hpp"

using namespace ringtrain::telemetry;
namespace fs = std::filesystem;

namespace {

std::string bytes(std::initializer_list<int> v) {
    std::string s;
    for (int b : v) s.push_back(static_cast<char>(b));
    return s;
}

uint32_t read_u32(const std::string& s, size_t at) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
    return v;
}

}  // namespace

TEST_CASE("an Event is wall_time (fixed64), step (varint), file_version and summary values", "[telemetry][tensorboard]") {
    // wall_time 0.0: key 0x09 and eight zero bytes; step 300: key 0x10, varint ac 02.
    const std::string head = bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0xac, 0x02});
    CHECK(tfevents::encode_event(0.0, 300, "", {}) == head);
    // file_version: key 0x1a (field 3, length-delimited), length, text.
    CHECK(tfevents::encode_event(0.0, 300, "brain.Event:2", {}) == head + bytes({0x1a, 13}) + "brain.Event:2");
    // summary (field 5: 0x2a) { value (field 1: 0x0a) { tag (0x0a) "a", simple_value (field 2, fixed32: 0x15) 1.0f } }
    const std::string value = bytes({0x0a, 1}) + "a" + bytes({0x15, 0x00, 0x00, 0x80, 0x3f});
    const std::string summary = bytes({0x0a, static_cast<int>(value.size())}) + value;
    CHECK(tfevents::encode_event(0.0, 300, "", {{"a", 1.0}}) ==
          head + bytes({0x2a, static_cast<int>(summary.size())}) + summary);
}

TEST_CASE("a restart is an Event with SessionLog (field 7) status START (1)", "[telemetry][tensorboard]") {
    const std::string head = bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 21});
    // session_log: key 0x3a (field 7, length-delimited), length 2, { status: key 0x08 (field 1, varint), 1 }
    CHECK(tfevents::encode_session_start(0.0, 21) == head + bytes({0x3a, 2, 0x08, 1}));
}

TEST_CASE("a TFRecord is the length, its masked CRC-32C, the data and its masked CRC-32C", "[telemetry][tensorboard]") {
    const std::string data = "hello";
    const std::string r = tfevents::frame_record(data);
    REQUIRE(r.size() == 8 + 4 + data.size() + 4);
    CHECK(r.substr(0, 8) == bytes({5, 0, 0, 0, 0, 0, 0, 0}));
    auto masked = [](const std::string& s) {
        const uint32_t c = ringtrain::crc32c(std::as_bytes(std::span<const char>(s.data(), s.size())));
        return ((c >> 15) | (c << 17)) + 0xa282ead8u;
    };
    CHECK(read_u32(r, 8) == masked(r.substr(0, 8)));
    CHECK(r.substr(12, 5) == data);
    CHECK(read_u32(r, 17) == masked(data));
    CHECK(tfevents::masked_crc32c(data) == masked(data));
}

TEST_CASE("each writer starts a file of its own with the file_version event", "[telemetry][tensorboard]") {
    const fs::path dir = fs::temp_directory_path() / ("ringtrain-tb-" + std::to_string(getpid()));
    fs::remove_all(dir);
    std::string first, second;
    {
        TensorBoardWriter a((dir / "tb").string());
        TensorBoardWriter b((dir / "tb").string());  // same second, same host: a resumed run started at once
        first = a.path();
        second = b.path();
        a.scalars(3, {{"train/loss", 0.5}});
    }
    CHECK(first != second);
    CHECK(fs::path(first).filename().string().rfind("events.out.tfevents.", 0) == 0);
    std::ifstream in(first, std::ios::binary);
    const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string version = tfevents::frame_record(tfevents::encode_event(0, 0, "brain.Event:2", {}));
    REQUIRE(content.size() > version.size());
    CHECK(content.find("brain.Event:2") != std::string::npos);
    CHECK(content.find("train/loss") != std::string::npos);
    CHECK(TensorBoardWriter().enabled() == false);
    fs::remove_all(dir);
}
