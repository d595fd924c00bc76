// TensorBoard event files: the protobuf wire format by hand (varints, fixed64/fixed32, length-delimited fields) and
// TFRecord framing (see the header).
#include "ringtrain/telemetry/tensorboard_writer.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <span>
#include <type_traits>

#include "ringtrain/core/crc32c.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::telemetry {

namespace fs = std::filesystem;

namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

template <class T>
void put_little_endian(std::string& out, T v) {
    static_assert(std::is_unsigned_v<T>);
    for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
    put_key(out, field, kLengthDelimited);
    put_varint(out, bytes.size());
    out.append(bytes);
}

std::string host_name() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
    return buf;
}

}  // namespace

namespace tfevents {

uint32_t masked_crc32c(std::string_view bytes) {
    const uint32_t crc = crc32c(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string frame_record(std::string_view data) {
    std::string length;
    put_little_endian(length, static_cast<uint64_t>(data.size()));
    std::string out = length;
    put_little_endian(out, masked_crc32c(length));
    out.append(data);
    put_little_endian(out, masked_crc32c(data));
    return out;
}

std::string encode_event(double wall_time, int64_t step, std::string_view file_version,
                         const std::vector<Scalar>& values) {
    std::string event;
    uint64_t wall_bits = 0;
    std::memcpy(&wall_bits, &wall_time, sizeof wall_bits);
    put_key(event, 1, kFixed64);
    put_little_endian(event, wall_bits);
    put_key(event, 2, kVarint);
    put_varint(event, static_cast<uint64_t>(step));  // int64: negative steps would take ten bytes, as protobuf does
    if (!file_version.empty()) put_bytes(event, 3, file_version);
    if (!values.empty()) {
        std::string summary;
        for (const Scalar& s : values) {
            std::string value;
            put_bytes(value, 1, s.tag);
            const float f = static_cast<float>(s.value);
            uint32_t f_bits = 0;
            std::memcpy(&f_bits, &f, sizeof f_bits);
            put_key(value, 2, kFixed32);
            put_little_endian(value, f_bits);
            put_bytes(summary, 1, value);
        }
        put_bytes(event, 5, summary);
    }
    return event;
}

std::string encode_session_start(double wall_time, int64_t step) {
    std::string event = encode_event(wall_time, step, "", {});
    std::string session_log;
    put_key(session_log, 1, kVarint);
    put_varint(session_log, 1);  // SessionLog.START
    put_bytes(event, 7, session_log);
    return event;
}

}  // namespace tfevents

namespace {

double unix_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw InputError("output.tensorboard: cannot create " + dir + ": " + ec.message());
    const std::string base = dir + "/events.out.tfevents." +
                             std::to_string(static_cast<int64_t>(unix_seconds())) + "." + host_name();
    path_ = base;
    for (int n = 1; fs::exists(path_); ++n) path_ = base + "." + std::to_string(n);
    out_.open(path_, std::ios::binary);
    if (!out_) throw InputError("output.tensorboard: cannot write " + path_ + ": " + std::strerror(errno));
    write_event(tfevents::encode_event(unix_seconds(), 0, "brain.Event:2", {}));
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<Scalar>& values) {
    if (!enabled() || values.empty()) return;
    write_event(tfevents::encode_event(unix_seconds(), step, "", values));
}

void TensorBoardWriter::restart_at(int64_t step) {
    if (enabled()) write_event(tfevents::encode_session_start(unix_seconds(), step));
}

void TensorBoardWriter::write_event(const std::string& event) {
    out_ << tfevents::frame_record(event);
    out_.flush();
}

}  // namespace ringtrain::telemetry
