// Timeline: Chrome trace events per rank (see the header for the file layout).
#include "ringtrain/telemetry/timeline.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace ringtrain::telemetry {

Timeline::Timeline(std::string path, int rank, bool enabled, size_t max_events)
    : path_(std::move(path)), rank_(rank), enabled_(enabled && !path_.empty()), max_events_(max_events) {
    file_path_ = rank_path(path_, rank_);
    origin_steady_ = std::chrono::steady_clock::now();
    origin_wall_us_ = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
}

std::string Timeline::rank_path(const std::string& path, int rank) {
    return rank == 0 ? path : path + ".rank" + std::to_string(rank);
}

int64_t Timeline::now_us() const {
    return origin_wall_us_ +
           std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - origin_steady_).count();
}

int Timeline::tid_locked(std::thread::id id) {
    auto it = tids_.find(id);
    if (it != tids_.end()) return it->second;
    const int tid = static_cast<int>(tids_.size()) + 1;
    tids_.emplace(id, tid);
    return tid;
}

void Timeline::add(std::string name, std::string category, int64_t start_us, int64_t dur_us, SpanArgs args) {
    if (!enabled_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (events_.size() >= max_events_) {
        ++dropped_;
        return;
    }
    const int tid = tid_locked(std::this_thread::get_id());
    events_.push_back({std::move(name), std::move(category), std::move(args), start_us, dur_us, tid});
}

void Timeline::name_thread(const std::string& name) {
    if (!enabled_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const int tid = tid_locked(std::this_thread::get_id());
    for (auto& [t, n] : thread_names_)
        if (t == tid) {
            n = name;
            return;
        }
    thread_names_.emplace_back(tid, name);
}

size_t Timeline::event_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return events_.size();
}

size_t Timeline::dropped_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return dropped_;
}

bool Timeline::write(std::string* error) const {
    if (!enabled_) return true;
    using nlohmann::json;
    const std::string tmp = file_path_ + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) {
            if (error) *error = "cannot open " + tmp + " for writing";
            return false;
        }
        // One event at a time, never the whole document: a DOM of every event plus its text took ~0.9-1.3 KB of
        // memory per event while writing (bench/RESULTS.md, "The timeline written event by event"). Invalid UTF-8 in
        // a name becomes U+FFFD instead of an exception: a trace is written whatever the names.
        errno = 0;  // what a failed write leaves here names the reason
        bool first = true;
        const auto put = [&](const json& ev) {
            out << (first ? "\n" : ",\n") << ev.dump(-1, ' ', false, json::error_handler_t::replace);
            first = false;
        };
        std::lock_guard<std::mutex> lock(mutex_);
        out << "{\"displayTimeUnit\":\"ms\",";
        if (dropped_ > 0) out << "\"otherData\":{\"droppedEvents\":" << dropped_ << "},";
        out << "\"traceEvents\":[";
        put({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0},
             {"args", {{"name", "rank " + std::to_string(rank_)}}}});
        put({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0}, {"args", {{"sort_index", rank_}}}});
        for (const auto& [tid, name] : thread_names_)
            put({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", tid}, {"args", {{"name", name}}}});
        for (const Event& e : events_) {
            json ev = {{"name", e.name}, {"cat", e.category}, {"ph", "X"},  {"ts", e.start_us},
                       {"dur", e.dur_us}, {"pid", rank_},      {"tid", e.tid}};
            if (!e.args.empty()) ev["args"] = e.args;
            put(ev);
        }
        out << "\n]}\n";
        out.flush();
        if (!out) {
            // A full disk: the partial file would keep it full.
            const int why = errno;
            out.close();
            std::remove(tmp.c_str());
            if (error) *error = "cannot write " + tmp + (why != 0 ? std::string(" (") + std::strerror(why) + ")" : "");
            return false;
        }
    }
    if (std::rename(tmp.c_str(), file_path_.c_str()) != 0) {
        if (error) *error = "cannot rename " + tmp + " to " + file_path_;
        std::remove(tmp.c_str());
        return false;
    }
    return true;
}

}  // namespace ringtrain::telemetry
