#include "ringtrain/telemetry/metrics_writer.hpp"

#include <cstdio>
#include <filesystem>

#include "ringtrain/core/error.hpp"

namespace ringtrain::telemetry {

MetricsWriter::MetricsWriter(const std::string& path, bool append)
    : out_(path, append ? std::ios::app : std::ios::trunc) {
    if (!out_) throw Error(path + ": cannot open for writing; check that output.dir is writable");
}

void MetricsWriter::write(const nlohmann::json& record) {
    if (!out_.is_open()) return;
    out_ << record.dump() << '\n';
    out_.flush();
}

void write_json_atomically(const std::string& path, const nlohmann::json& doc) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        if (!out) throw Error(tmp + ": cannot open for writing; check that the output folder is writable");
        out << doc.dump(2) << '\n';
        if (!out.flush()) throw Error(tmp + ": write failed (disk full?)");
    }
    std::filesystem::rename(tmp, path);
}

}  // namespace ringtrain::telemetry
