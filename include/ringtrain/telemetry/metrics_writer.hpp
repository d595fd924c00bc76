// metrics.jsonl: one JSON object per logged step or epoch, appended and flushed as it happens so a killed
// job keeps what it logged. Disabled writers (ranks other than 0) ignore every call.
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace ringtrain::telemetry {

class MetricsWriter {
public:
    MetricsWriter() = default;  // disabled
    // append: keep earlier lines (resuming a run); otherwise start the file afresh.
    MetricsWriter(const std::string& path, bool append);
    void write(const nlohmann::json& record);
    bool enabled() const { return out_.is_open(); }

private:
    std::ofstream out_;
};

// Writes `doc` to `path` through a temporary file and a rename, so readers never see half a file.
void write_json_atomically(const std::string& path, const nlohmann::json& doc);

}  // namespace ringtrain::telemetry
