// Checkpoints: parameters, optimizer state, loop position and every rank's RNG state in one binary file, written
// to a temporary name, synced and renamed, so a crash never leaves a half-written checkpoint where resume would
// find it. Every byte is covered by a CRC-32C (the header by a footer, each tensor by its entry in the header),
// and loading verifies all of them before it changes anything.
//
// Format 2: "RTCKPT02" | u64 header length | JSON header | the tensors' float32 data, in header order |
//           u32 CRC-32C of everything before the tensors (magic, length, header).
// Format 1 files (magic "RTCKPT01", no checksums, no model hash) are refused with a message saying so: loading
// unverifiable weights is what checksums exist to prevent.
//
// Local SGD with several ranks adds every rank's own copy of every tensor after the run's own ones (header key
// "rank_copies" = the number of ranks, tensors named "rank<R>/<name>", rank 0's first): the ranks' parameters drift
// apart between averages and each keeps its own optimizer state. A synchronous run with BatchNorm at several ranks
// adds every rank's copy of the buffers alone (its own running statistics; "rank_copies_first" and
// "rank_copies_tensors" say which tensors are copied, absent: all). Files without copies (written before they
// existed, or by other runs) read as before. A ringtrain older than 2026-11-29 evaluates a local SGD file (it reads
// the model and skips the rest) but refuses to resume it, and calls a file with buffer copies damaged (its tensor
// list does not divide into copies of all): resume=auto there passes over it to an older checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/nn/layer.hpp"
#include "ringtrain/optim/optimizer.hpp"

namespace ringtrain::train {

struct LoopState {
    int64_t epoch = 0;            // epoch to continue in
    int64_t step_in_epoch = 0;    // first step still to run in that epoch
    int64_t global_step = 0;      // steps run so far in all
    int64_t steps_per_epoch = 0;  // of the run that wrote it (batch size x world size x passes fix it)
    int64_t world_size = 0;       // ranks of the run that wrote it
    double epoch_loss_sum = 0;    // running training-loss sums of the current epoch (all ranks)
    double epoch_samples = 0;
    std::vector<Rng::State> rng_states;  // one per rank, for dropout
    nlohmann::json extra;                // anything else worth recording (the resolved config)
};

// The file is damaged, missing or not a checkpoint of this format (as opposed to a sound checkpoint that does not
// fit this run): resume may fall back to an older checkpoint.
class CheckpointUnreadable : public InputError {
public:
    using InputError::InputError;
};

// Every rank's own values of a run of the checkpoint's tensors (in the saved order: the parameters, the buffers, then
// the optimizer's state), from tensor `first` on: values[i] holds rank 0's values of tensor first + i, then rank 1's,
// and so on (sync::gather_to_root's layout). Local SGD copies every tensor (first 0); a synchronous run with
// BatchNorm copies the buffers alone, whose running statistics each rank keeps for itself between evaluations.
// Empty: none.
struct RankCopies {
    int64_t ranks = 0;
    std::vector<std::vector<float>> values;
    size_t first = 0;
    bool empty() const { return ranks == 0; }
    // Copies of exactly tensors first .. first + count - 1 (what a run that keeps those per rank can resume from).
    bool cover(size_t from, size_t count) const { return !empty() && first == from && values.size() == count; }
};

// `copies`, when not empty, must hold tensors first .. first + values.size() - 1 of `params` and the optimizer's
// state for copies.ranks ranks.
// `optimizer_state`, when given, is saved in place of the optimizer's own state (its names; tensors of state()'s
// shapes, in its order): the sparse path's local SGD saves the ranks' averaged state beside their averaged model.
void save_checkpoint(const std::string& path, const std::vector<nn::Parameter*>& params, optim::Optimizer* opt,
                     const LoopState& state, const RankCopies& copies = {},
                     std::vector<Tensor>* optimizer_state = nullptr);

// Verifies the whole file, then restores `params` and (when given) the optimizer, and fills `copies` (when given)
// with the file's per-rank copies (empty when it has none). Throws CheckpointUnreadable for a damaged file,
// InputError when it is sound but of another model or optimizer (names the first differing tensor).
LoopState load_checkpoint(const std::string& path, const std::vector<nn::Parameter*>& params, optim::Optimizer* opt,
                          RankCopies* copies = nullptr);

// Local SGD: the global step of the ranks' last average, recorded in extra next to per-rank copies, so that a resumed
// run averages again exactly where the uninterrupted one would (say, at an epoch's end right after a step checkpoint).
void record_last_average_step(LoopState& state, int64_t step);
// The step record_last_average_step recorded; CheckpointUnreadable when it is missing or not in [0, global_step].
int64_t recorded_last_average_step(const std::string& path, const LoopState& state);

// The steps since the last metrics line and their loss and sample sums, recorded by a checkpoint inside an epoch
// (extra.log_window) so that the resumed run's next line covers the same steps as an uninterrupted run's (both paths).
struct LogWindow {
    int64_t steps = 0;
    double loss_sum = 0, samples = 0;
};
// Records `w` when the position is inside an epoch and steps are pending; otherwise nothing.
void record_log_window(LoopState& state, const LogWindow& w);
// What record_log_window recorded; all zero when absent or malformed.
LogWindow recorded_log_window(const LoopState& state);

// A checkpoint of a run on named classes (an image folder) records them in extra["classes"]; a run that resumes
// or evaluates it must have the same names in the same order (InputError naming both lists). A checkpoint without
// names (IDX, CIFAR-10, synthetic data) is not checked.
void check_checkpoint_classes(const std::string& path, const nlohmann::json& extra,
                              const std::vector<std::string>& classes);

// Checkpoint folder management: "ckpt-<global step>.bin" files plus a "latest" pointer.
std::string checkpoint_file_name(int64_t global_step);
// The global step in a checkpoint_file_name, or -1 when `name` is not one.
int64_t checkpoint_step(const std::string& name);
// Writes `latest` (atomically) and deletes all but the `keep` checkpoints of the highest global steps (never
// `file_name` itself).
void publish_checkpoint(const std::string& dir, const std::string& file_name, int64_t keep);

// What resume=auto may load, best first: the file `latest` names (when it is a checkpoint file name inside `dir`),
// then every other checkpoint in `dir` by descending global step.
struct ResumeCandidates {
    std::vector<std::string> paths;
    std::string latest_problem;  // what is wrong with `latest` (empty, missing, outside, gone); "" when nothing is
};
ResumeCandidates resume_candidates(const std::string& dir);

// checkpoint.resume=auto, the one rule both training paths follow: tries resume_candidates(dir) best first with
// `load` (which restores the run from one file and throws CheckpointUnreadable for a damaged one, InputError for a
// sound one that does not fit this run), and returns the path it loaded; "" when `dir` holds no checkpoint (a
// fresh start). A damaged candidate is passed over, with one warning line on stderr naming every file passed over
// and why (`latest`'s problem included); when every candidate is unusable it throws InputError instead, so a run
// never restarts from step 0 over its own earlier outputs.
std::string resume_newest(const std::string& dir, const std::function<void(const std::string&)>& load);

// `eval --checkpoint`: loads (with `load`) a ckpt-*.bin file as it is; for a checkpoints folder, a run's output.dir
// (its checkpoints/) or a `latest` pointer, the checkpoint `latest` names, else the newest that verifies (resume=auto's
// order; one warning line names what was passed over). Returns the path loaded. InputError naming `given` when there
// is no checkpoint, or none verifies.
std::string load_checkpoint_to_evaluate(const std::string& given, const std::function<void(const std::string&)>& load);

// Whether `dir` holds checkpoints or a `latest` pointer (a previous run wrote there).
bool holds_checkpoints(const std::string& dir);
// Whether output_dir holds a previous run (a fresh run there is refused): checkpoints in checkpoint_dir, a
// summary.json, or a metrics.jsonl with something in it. A run that failed on bad input before its first logged step leaves an empty
// one, which must not stop the same command from running again once the input is fixed.
bool holds_previous_run(const std::string& output_dir, const std::string& checkpoint_dir);
// InputError when dir/latest exists and is not a regular file (a folder there failed the run's first checkpoint
// write, after training up to it).
void check_latest_pointer(const std::string& dir);
// Removes temporary files a killed or failed write left behind (ckpt-*.bin.tmp, latest.tmp).
void remove_stale_temporaries(const std::string& dir);
// After a resume at `global_step`: the checkpoints of later steps in `dir` are the run it left (a resume from an
// older checkpoint, or newer ones that did not verify). Kept, they would outlive this run's own under
// checkpoint.keep and be what resume=auto takes next: each is renamed to <name>.abandoned (-2, -3, ... past an
// earlier roll-back's: nothing is deleted or replaced), and before that `latest` names the resumed file when it is in
// `dir` (else it goes: this run's first checkpoint writes it). Returns the names set aside.
std::vector<std::string> set_aside_checkpoints_after(const std::string& dir, int64_t global_step,
                                                     const std::string& resumed_path);

}  // namespace ringtrain::train
