#include "ringtrain/telemetry/metrics_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "ringtrain/core/error.hpp"

namespace ringtrain::telemetry {

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_APPEND | (append ? 0 : O_TRUNC), 0666);  // less the umask, as ofstream
    if (fd_ < 0) throw Error(path + ": cannot open for writing; check that output.dir is writable");
}

MetricsWriter::~MetricsWriter() {
    if (lost_ > 0)
        std::fprintf(stderr, "ringtrain: warning: %s misses %lld line(s): their writes failed\n", path_.c_str(),
                     static_cast<long long>(lost_));
    close();
}

MetricsWriter::MetricsWriter(MetricsWriter&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      lost_(std::exchange(other.lost_, 0)),
      failing_(std::exchange(other.failing_, false)) {}

MetricsWriter& MetricsWriter::operator=(MetricsWriter&& other) noexcept {
    if (this != &other) {
        close();
        path_ = std::move(other.path_);
        fd_ = std::exchange(other.fd_, -1);
        lost_ = std::exchange(other.lost_, 0);
        failing_ = std::exchange(other.failing_, false);
    }
    return *this;
}

void MetricsWriter::close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

void MetricsWriter::write(const nlohmann::json& record) {
    if (fd_ < 0) return;
    // Invalid UTF-8 in a string (a path, a message) is replaced, not thrown: a log line must not end the run.
    const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
    const off_t before = ::lseek(fd_, 0, SEEK_END);
    size_t done = 0;
    int err = 0;
    while (done < line.size()) {
        const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
        if (n > 0) {
            done += static_cast<size_t>(n);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            err = n < 0 ? errno : ENOSPC;
            break;
        }
    }
    if (done == line.size()) {
        if (failing_) {
            std::fprintf(stderr, "ringtrain: warning: %s: writing works again; %lld line(s) were lost\n", path_.c_str(),
                         static_cast<long long>(lost_));
            failing_ = false;
        }
        return;
    }
    // Half a line would spoil the file for every JSON-lines reader: cut it off again.
    if (done > 0 && before >= 0) (void)::ftruncate(fd_, before);
    ++lost_;
    if (!failing_) {
        std::fprintf(stderr, "ringtrain: warning: %s: cannot write a line (%s; disk full?); training goes on and later "
                             "lines are tried again\n", path_.c_str(), std::strerror(err));
        failing_ = true;
    }
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
