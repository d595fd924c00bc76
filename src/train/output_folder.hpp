// What rank 0 does to output.dir when a run opens it (private to train): the lock that keeps a second run out, and
// the trim of metrics.jsonl back to the checkpoint a run resumes from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain::train::detail {

// An exclusive flock on output_dir/run.lock for as long as the object lives (the kernel drops it when the process
// ends, however it ends, so a killed or requeued job never leaves it held). Two runs writing one folder used to
// both go ahead: the same checkpoint names, one metrics.jsonl of interleaved lines, one summary.json overwriting the
// other. InputError naming output.dir (and the holder's pid, written into the file) when another process holds it.
class OutputFolderLock {
public:
    OutputFolderLock() = default;
    explicit OutputFolderLock(const std::string& output_dir);
    ~OutputFolderLock();
    OutputFolderLock(OutputFolderLock&& other) noexcept;
    OutputFolderLock& operator=(OutputFolderLock&& other) noexcept;
    OutputFolderLock(const OutputFolderLock&) = delete;
    OutputFolderLock& operator=(const OutputFolderLock&) = delete;

private:
    int fd_ = -1;
};

// A run resumed from a checkpoint at `global_step`, `epochs_done` epochs completed, runs the steps after it again:
// the lines the interrupted run logged past that point (a kill between checkpoints) go, so every step and epoch
// has one line. Keeps step lines up to global_step and epoch lines up to epochs_done; a line that is not JSON (the
// torn last line of a killed writer) goes too, so the resumed run's first line starts a line of its own. Written
// through a temporary file and a rename. Nothing happens when the file does not exist.
// Returns whether epoch `epochs_done` has its line (an epoch's checkpoint is written before its evaluation, so a
// run can stop between the two).
bool keep_metrics_up_to(const std::string& metrics_path, int64_t epochs_done, int64_t global_step);

// One warning line on stderr naming the later checkpoints set_aside_checkpoints_after renamed in `dir` (nothing
// when none).
void report_set_aside(const std::string& dir, const std::vector<std::string>& names, int64_t global_step);

}  // namespace ringtrain::train::detail
