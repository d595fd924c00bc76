// TensorBoard event files without a protobuf dependency: TFRecord framing (u64 length, masked CRC-32C of the length,
// the data, masked CRC-32C of the data; all little-endian) around Event messages encoded by hand — the handful of
// fields a scalar needs, numbered as in TensorFlow's event.proto and summary.proto:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }      Value { string tag = 1; float simple_value = 2; }
// The first event of a file carries file_version "brain.Event:2" (what TensorBoard expects of a summary writer). A
// resumed run's file then marks the restart: Event { SessionLog session_log = 7; } with SessionLog { status = 1:
// START }, at the first step it will write, so TensorBoard hides what the earlier files hold from that step on.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace ringtrain::telemetry {

struct Scalar {
    std::string tag;  // "train/loss": TensorBoard groups tags by the part before the slash
    double value;     // stored as a float (simple_value)
};

// The encodings, for tests and other writers.
namespace tfevents {
// CRC-32C rotated right by 15 and offset, as TFRecord stores it.
uint32_t masked_crc32c(std::string_view bytes);
// One TFRecord: the length, its masked CRC, `data`, its masked CRC.
std::string frame_record(std::string_view data);
// An Event: wall_time and step, then file_version when not empty, then a summary of `values` when not empty.
std::string encode_event(double wall_time, int64_t step, std::string_view file_version,
                         const std::vector<Scalar>& values);
// An Event: wall_time and step, then a SessionLog with status START.
std::string encode_session_start(double wall_time, int64_t step);
}  // namespace tfevents

class TensorBoardWriter {
public:
    TensorBoardWriter() = default;  // disabled (ranks other than 0): every call does nothing
    // Creates `dir` and a new file in it, events.out.tfevents.<unix seconds>.<host name> (".<n>" appended when that
    // name is taken: a resumed run started within the same second), and writes the file_version event. A resumed run
    // gets a file of its own next to the earlier ones; TensorBoard reads them all, ordered by step. Throws InputError
    // naming the path when the file cannot be created.
    explicit TensorBoardWriter(const std::string& dir);
    bool enabled() const { return out_.is_open(); }
    const std::string& path() const { return path_; }
    // One event at `step` holding every value as a scalar, written and flushed at once (a killed job keeps it).
    void scalars(int64_t step, const std::vector<Scalar>& values);
    // A resumed run, before its first scalars: TensorBoard drops the earlier files' events at `step` and later, which
    // a run killed after its last checkpoint wrote and the resumed run writes again (the SessionLog START that
    // TensorFlow's Supervisor and PyTorch's SummaryWriter(purge_step=...) write on a restart).
    void restart_at(int64_t step);

private:
    void write_event(const std::string& event);

    std::string path_;
    std::ofstream out_;
};

}  // namespace ringtrain::telemetry
