// OutputFolderLock and keep_metrics_up_to (see output_folder.hpp).
#include "output_folder.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"

namespace ringtrain::train::detail {

namespace fs = std::filesystem;

OutputFolderLock::OutputFolderLock(const std::string& output_dir) {
    fs::create_directories(output_dir);
    const std::string path = output_dir + "/run.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
        throw InputError("output.dir: cannot open " + path + " (" + std::strerror(errno) +
                         "); name a writable folder");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        char holder[32] = {0};
        const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
        ::close(fd_);
        fd_ = -1;
        if (err != EWOULDBLOCK) throw InputError("output.dir: cannot lock " + path + " (" + std::strerror(err) + ")");
        std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string();
        while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
        throw InputError("output.dir " + output_dir + " is in use by another run" +
                         (pid.empty() ? std::string() : " (process " + pid + " on its host)") +
                         "; wait for it to end, or choose another output.dir");
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0) {
        const ssize_t wrote = ::pwrite(fd_, pid.data(), pid.size(), 0);
        (void)wrote;  // the pid only makes the message above more useful
    }
}

OutputFolderLock::~OutputFolderLock() {
    if (fd_ >= 0) ::close(fd_);  // closing drops the lock; the file stays (removing it would race a new holder)
}

OutputFolderLock::OutputFolderLock(OutputFolderLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

OutputFolderLock& OutputFolderLock::operator=(OutputFolderLock&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = other.fd_;
        other.fd_ = -1;
    }
    return *this;
}

bool keep_metrics_up_to(const std::string& metrics_path, int64_t epochs_done, int64_t global_step) {
    std::ifstream in(metrics_path);
    if (!in) return false;
    std::vector<std::string> kept;
    bool dropped = false, epoch_logged = false;
    for (std::string line; std::getline(in, line);) {
        const nlohmann::json rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        bool keep = rec.is_object();
        if (keep) {
            const std::string type = rec.value("type", std::string());
            if (type == "step") keep = rec.value("global_step", int64_t{0}) <= global_step;
            if (type == "epoch") keep = rec.value("epoch", int64_t{0}) <= epochs_done;
            if (keep && type == "epoch" && rec.value("epoch", int64_t{0}) == epochs_done) epoch_logged = true;
        }
        if (keep) {
            kept.push_back(std::move(line));
        } else {
            dropped = true;
        }
    }
    in.close();
    if (!dropped) return epoch_logged;
    const std::string tmp = metrics_path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        for (const std::string& line : kept) out << line << '\n';
        if (!out) throw Error(tmp + ": cannot write; check that output.dir is writable");
    }
    fs::rename(tmp, metrics_path);
    return epoch_logged;
}

void report_set_aside(const std::string& dir, const std::vector<std::string>& names, int64_t global_step) {
    if (names.empty()) return;
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    std::fprintf(stderr,
                 "ringtrain: warning: resumed at step %lld; %s held later checkpoints of the run it left (%s): renamed "
                 "to *.abandoned, so that checkpoint.keep and resume=auto keep to this run\n",
                 static_cast<long long>(global_step), dir.c_str(), list.c_str());
}

}  // namespace ringtrain::train::detail
