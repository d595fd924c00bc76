// metrics.jsonl: one JSON object per logged step or epoch, appended as it happens (one write(2) a line, no buffer) so
// a killed job keeps what it logged. Disabled writers (ranks other than 0) ignore every call.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace ringtrain::telemetry {

class MetricsWriter {
public:
    MetricsWriter() = default;  // disabled
    // append: keep earlier lines (resuming a run); otherwise start the file afresh. Throws Error when it cannot open.
    MetricsWriter(const std::string& path, bool append);
    ~MetricsWriter();  // says how many lines were lost, if any
    MetricsWriter(MetricsWriter&& other) noexcept;
    MetricsWriter& operator=(MetricsWriter&& other) noexcept;
    MetricsWriter(const MetricsWriter&) = delete;
    MetricsWriter& operator=(const MetricsWriter&) = delete;

    // A line that cannot be written whole (a full disk, a quota) is cut back off the file, so every line stays a
    // JSON object; the run goes on (losing a log line must not cost the training), with one warning when writes
    // start failing and one when they work again, both naming the file and the lines lost. Never throws.
    void write(const nlohmann::json& record);
    bool enabled() const { return fd_ >= 0; }
    int64_t lines_lost() const { return lost_; }

private:
    void close() noexcept;

    std::string path_;
    int fd_ = -1;
    int64_t lost_ = 0;
    bool failing_ = false;
};

// Writes `doc` to `path` through a temporary file and a rename, so readers never see half a file.
void write_json_atomically(const std::string& path, const nlohmann::json& doc);

}  // namespace ringtrain::telemetry
