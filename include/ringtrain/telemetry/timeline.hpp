// Timeline: spans of work ("pack", "allreduce bucket 3", "forward", ...) recorded from any thread and written as a
// Chrome trace (JSON object format, "X" complete events), loadable in chrome://tracing and Perfetto.
//
// Each rank keeps its own events and writes its own file; nothing is gathered over MPI (so writing never needs the
// other ranks, and a rank that fails can still write what it has). Rank 0 writes `path` itself, rank R > 0 writes
// `path.rank<R>` (see rank_path). pid = rank, tid = a small number per thread in order of its first event (the
// recording thread may name itself with name_thread). Timestamps are microseconds of wall-clock time (system
// clock at construction plus the steady clock since), so files from ranks on the same host or NTP-synchronised
// hosts line up when opened together.
//
// Cheap when disabled: every call returns at once after one branch (Span does not even read the clock). Thread
// safe: one mutex around the event list. Events beyond `max_events` are dropped and counted (written as
// "droppedEvents" in the file) so a long run cannot grow without bound.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ringtrain::telemetry {

// An event's "args": a JSON object, escaped when the file is written (names may hold any character). Building one
// allocates, so callers build it only when the timeline is on (Span::active(), Timeline::enabled()).
using SpanArgs = nlohmann::json::object_t;

class Timeline {
public:
    Timeline(std::string path, int rank, bool enabled, size_t max_events = 4'000'000);
    Timeline(const Timeline&) = delete;
    Timeline& operator=(const Timeline&) = delete;

    bool enabled() const { return enabled_; }
    int rank() const { return rank_; }
    // The file this rank writes: `path` on rank 0, `path.rank<R>` elsewhere.
    static std::string rank_path(const std::string& path, int rank);
    const std::string& file_path() const { return file_path_; }

    // Microseconds on the timeline's clock (what `add` expects).
    int64_t now_us() const;

    // A finished span; empty `args` are left out of the file.
    void add(std::string name, std::string category, int64_t start_us, int64_t dur_us, SpanArgs args = {});
    // Names the calling thread in the trace (a "thread_name" metadata event).
    void name_thread(const std::string& name);

    size_t event_count() const;
    size_t dropped_count() const;

    // Writes this rank's file (write to a temporary name, then rename). Returns false, with `error` set, if the file
    // could not be written; does nothing and returns true when disabled.
    bool write(std::string* error = nullptr) const;

private:
    struct Event {
        std::string name, category;
        SpanArgs args;
        int64_t start_us, dur_us;
        int tid;
    };
    int tid_locked(std::thread::id id);

    std::string path_, file_path_;
    int rank_;
    bool enabled_;
    size_t max_events_;
    int64_t origin_wall_us_;
    std::chrono::steady_clock::time_point origin_steady_;

    mutable std::mutex mutex_;
    std::vector<Event> events_;
    std::vector<std::pair<int, std::string>> thread_names_;
    std::unordered_map<std::thread::id, int> tids_;
    size_t dropped_ = 0;
};

// Records [construction, destruction) as one span when the timeline is enabled; otherwise does nothing.
class Span {
public:
    Span(Timeline* timeline, std::string name, const char* category = "ringtrain")
        : tl_(timeline && timeline->enabled() ? timeline : nullptr) {
        if (tl_) {
            name_ = std::move(name);
            category_ = category;
            start_ = tl_->now_us();
        }
    }
    ~Span() {
        if (tl_) tl_->add(std::move(name_), category_, start_, tl_->now_us() - start_, std::move(args_));
    }
    // The event's "args"; build them only when active().
    void set_args(SpanArgs args) {
        if (tl_) args_ = std::move(args);
    }
    bool active() const { return tl_ != nullptr; }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

private:
    Timeline* tl_;
    std::string name_;
    SpanArgs args_;
    const char* category_ = "";
    int64_t start_ = 0;
};

}  // namespace ringtrain::telemetry
