#include "ringtrain/data/sharded_loader.hpp"

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <numeric>
#include <utility>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/rng.hpp"

namespace ringtrain::data {

namespace {

// The shuffle seed of an epoch: a different permutation every epoch, the same on every rank.
uint64_t mix_seed(uint64_t seed, uint64_t epoch) {
    return mix64(seed ^ (epoch * kGoldenGamma + 0x632be59bd9b4e019ULL));
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

uint64_t augment_draw_key(uint64_t seed, int64_t epoch, int64_t index) {
    // A different stream from the shuffle's (the added constant), one word per (epoch, sample).
    return mix64(mix_seed(seed, static_cast<uint64_t>(epoch)) ^ mix64(static_cast<uint64_t>(index) + 0x2545F4914F6CDD1DULL));
}

ShardedLoader::ShardedLoader(const Dataset& dataset, LoaderOptions options) : dataset_(dataset), opt_(options) {
    check(opt_.world >= 1 && opt_.rank >= 0 && opt_.rank < opt_.world,
          "ShardedLoader: rank " + std::to_string(opt_.rank) + " is outside a world of " +
              std::to_string(opt_.world));
    if (opt_.batch_size < 1)
        throw InputError("batch size must be at least 1 (got " + std::to_string(opt_.batch_size) +
                         "); set a positive per-rank batch size");
    const int64_t n = dataset_.size();
    if (n < 1) throw InputError(dataset_.description() + ": holds no samples; check the data source");
    // Decoding a batch of files takes milliseconds: the hand-over to the prefetch thread is always worth it, and a
    // probe that measured "waited about a fill" (an input-bound run) would turn off the only overlap there is.
    if (dataset_.reads_are_costly()) opt_.prefetch_probe_batches = 0;
    sample_shape_ = dataset_.sample_shape();
    sample_numel_ = shape_numel(sample_shape_);
    if (opt_.mode == LoaderMode::Train) {
        const int64_t global = opt_.batch_size * opt_.world;
        steps_ = n / global;
        if (steps_ == 0)
            throw InputError(dataset_.description() + ": " + std::to_string(n) +
                             " samples are fewer than one global batch (" + std::to_string(opt_.world) +
                             " ranks x batch " + std::to_string(opt_.batch_size) + " = " + std::to_string(global) +
                             "); lower the batch size or use fewer ranks");
    } else {
        const int64_t count = eval_begin(opt_.rank + 1) - eval_begin(opt_.rank);
        steps_ = (count + opt_.batch_size - 1) / opt_.batch_size;
    }
    if (opt_.workers > 1) pool_ = std::make_unique<WorkerPool>(opt_.workers);
    if (opt_.prefetch) thread_ = std::thread([this] { worker(); });
}

ShardedLoader::~ShardedLoader() { stop_worker(); }

int64_t ShardedLoader::steps_per_epoch() const { return steps_; }

int64_t ShardedLoader::samples_per_epoch() const {
    if (opt_.mode == LoaderMode::Train) return steps_ * opt_.batch_size;
    return eval_begin(opt_.rank + 1) - eval_begin(opt_.rank);
}

int64_t ShardedLoader::eval_begin(int rank) const {
    // floor(r*N/world): consecutive ranks' shares differ by at most one sample and cover [0, N) exactly.
    return static_cast<int64_t>(static_cast<__int128>(rank) * dataset_.size() / opt_.world);
}

void ShardedLoader::make_order() {
    if (opt_.mode != LoaderMode::Train) return;
    const int64_t n = dataset_.size();
    order_.resize(static_cast<size_t>(n));
    std::iota(order_.begin(), order_.end(), int64_t(0));
    Rng rng(mix_seed(opt_.seed, static_cast<uint64_t>(epoch_)));
    for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
        const int64_t j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
        std::swap(order_[i], order_[j]);
    }
}

void ShardedLoader::start_epoch(int64_t epoch, int64_t first_step) {
    if (epoch < 0) throw InputError("epoch must be >= 0 (got " + std::to_string(epoch) + ")");
    if (first_step < 0 || first_step > steps_)
        throw InputError("cannot resume at step " + std::to_string(first_step) + " of an epoch of " +
                         std::to_string(steps_) +
                         " steps; did the batch size, world size or data set change since the checkpoint?");
    std::unique_lock<std::mutex> lk(mu_, std::defer_lock);
    if (opt_.prefetch) {
        lk.lock();
        want_step_ = -1;  // cancel a request the worker has not taken yet
        cv_.wait(lk, [this] { return !busy_; });
        ready_step_ = -1;
        error_ = nullptr;
        error_step_ = -1;
    }
    // The worker is idle with nothing requested, so it does not read order_ while it changes.
    // A split set for later steps holds from the new epoch's first step (the latest one decided).
    if (!splits_.empty()) {
        auto latest = std::move(splits_.back().second);
        splits_.clear();
        splits_.emplace_back(0, std::move(latest));
    }
    const bool same_order = started_ && epoch == epoch_;
    epoch_ = epoch;
    step_ = first_step;
    started_ = true;
    if (!same_order) make_order();
    if (prefetching() && step_ < steps_) request(step_);
}

std::string ShardedLoader::prefetch_note() const {
    if (!opt_.prefetch) return "off (" + (opt_.prefetch_off_reason.empty() ? std::string("data.prefetch false") : opt_.prefetch_off_reason) + ")";
    return prefetch_active_ ? "on" : prefetch_note_;
}

void ShardedLoader::set_split(int64_t first_step, std::vector<int64_t> counts) {
    check(opt_.mode == LoaderMode::Train, "ShardedLoader::set_split: only a training loader is split");
    check(counts.size() == static_cast<size_t>(opt_.world), "ShardedLoader::set_split: " +
                                                                std::to_string(counts.size()) + " counts for " +
                                                                std::to_string(opt_.world) + " ranks");
    int64_t sum = 0;
    for (int64_t c : counts) {
        check(c >= 1, "ShardedLoader::set_split: every rank reads at least one sample");
        sum += c;
    }
    check(sum == opt_.batch_size * opt_.world, "ShardedLoader::set_split: the counts sum to " + std::to_string(sum) +
                                                   ", the global batch is " +
                                                   std::to_string(opt_.batch_size * opt_.world));
    check(first_step > step_, "ShardedLoader::set_split: step " + std::to_string(first_step) +
                                  " may already be read; split from step() + 1 on");
    std::unique_lock<std::mutex> lk(mu_, std::defer_lock);
    if (opt_.prefetch) lk.lock();
    // Splits that start at or after this one are replaced; the ones before stay for steps still being read.
    while (!splits_.empty() && splits_.back().first >= first_step) splits_.pop_back();
    // Keep the one in force at step_ (and any later): earlier ones can no longer be asked for.
    while (splits_.size() >= 2 && splits_[1].first <= step_) splits_.erase(splits_.begin());
    splits_.emplace_back(first_step, std::move(counts));
}

ShardedLoader::Share ShardedLoader::share_of(int64_t step) const {
    const int64_t B = opt_.batch_size;
    const int64_t window = step * opt_.world * B;
    const std::vector<int64_t>* counts = nullptr;
    for (const auto& [from, c] : splits_)
        if (from <= step) counts = &c;
    if (!counts) return {window + opt_.rank * B, B};
    int64_t before = 0;
    for (int r = 0; r < opt_.rank; ++r) before += (*counts)[static_cast<size_t>(r)];
    return {window + before, (*counts)[static_cast<size_t>(opt_.rank)]};
}

void ShardedLoader::request(int64_t step) {
    want_step_ = step;
    cv_.notify_all();
}

bool ShardedLoader::next(Batch& out) {
    if (!started_) start_epoch(0, 0);
    if (step_ >= steps_) return false;
    // `out` holds the batch handed out last time: it is refilled now, or given to the prefetch thread below.
    if (opt_.before_refill && out.x.defined() && out.size() > 0) opt_.before_refill();
    const auto t0 = Clock::now();
    if (!prefetching()) {
        try {
            fill(step_, opt_.mode == LoaderMode::Train ? share_of(step_) : Share{}, out);
        } catch (...) {
            wait_seconds_ += seconds_since(t0);
            throw;
        }
        ++step_;
        wait_seconds_ += seconds_since(t0);
        return true;
    }
    std::unique_lock<std::mutex> lk(mu_);
    while (ready_step_ != step_) {
        if (error_ && error_step_ == step_) {
            std::exception_ptr e = std::exchange(error_, nullptr);
            error_step_ = -1;
            lk.unlock();
            wait_seconds_ += seconds_since(t0);
            std::rethrow_exception(e);
        }
        if (!busy_ && want_step_ != step_) request(step_);  // e.g. retrying after an error
        cv_.wait(lk);
    }
    std::swap(out.x, ready_.x);
    std::swap(out.y, ready_.y);
    ready_step_ = -1;
    ++step_;
    const double waited = seconds_since(t0);
    // The probe (the first batch of a run waits for a cold start, so it is left out).
    if (opt_.prefetch_probe_batches > 0 && probe_batches_ <= opt_.prefetch_probe_batches) {
        if (probe_batches_ > 0) probe_wait_s_ += waited;
        if (++probe_batches_ > opt_.prefetch_probe_batches && fills_ > 0) {
            const double wait = probe_wait_s_ / static_cast<double>(opt_.prefetch_probe_batches);
            const double fill = fill_seconds_ / static_cast<double>(fills_);
            // A caller that waits for every fill measures wait = fill minus the few microseconds between asking
            // for the batch and waiting for it, plus a wake-up; the margin keeps that case from depending on which is
            // larger, and a prefetch that hides under a quarter of the fill is not worth its thread.
            if (wait >= 0.75 * fill) {
                // The worker is idle now (its last fill was this batch, nothing is requested): nothing to stop.
                prefetch_active_ = false;
                char note[160];
                std::snprintf(note, sizeof note, "off after %lld batches: waited %.3f ms per batch, a fill takes %.3f ms",
                              static_cast<long long>(opt_.prefetch_probe_batches), wait * 1e3, fill * 1e3);
                prefetch_note_ = note;
            }
        }
    }
    if (prefetching() && step_ < steps_) request(step_);
    lk.unlock();
    wait_seconds_ += waited;
    return true;
}

void ShardedLoader::fill(int64_t step, const Share& split, Batch& b) const {
    const int64_t B = opt_.batch_size;
    int64_t n = B;
    const int64_t* idx = nullptr;
    int64_t first = 0;
    if (opt_.mode == LoaderMode::Train) {
        idx = order_.data() + split.first;
        n = split.count;
    } else {
        first = eval_begin(opt_.rank) + step * B;
        n = std::min(B, eval_begin(opt_.rank + 1) - first);
    }
    Shape xs;
    xs.reserve(sample_shape_.size() + 1);
    xs.push_back(n);
    xs.insert(xs.end(), sample_shape_.begin(), sample_shape_.end());
    auto size_buffer = [this](Tensor& t, Shape shape) {
        if (t.device() != Device::CPU) t = Tensor();
        if (opt_.allocate_host && shape_numel(shape) > t.capacity())
            t = opt_.allocate_host(std::move(shape));
        else
            t.resize(std::move(shape));
    };
    size_buffer(b.x, std::move(xs));
    size_buffer(b.y, {n});
    float* x = b.x.data();
    float* y = b.y.data();
    constexpr int64_t kMinFloatsPerWorker = int64_t{1} << 20;
    const bool costly = dataset_.reads_are_costly();
    const int64_t workers =
        std::min<int64_t>({pool_ ? pool_->threads() : 1, n, costly ? n : n * sample_numel_ / kMinFloatsPerWorker});
    auto read = [&](int64_t i) {
        y[i] = idx ? dataset_.read_training(idx[i], x + i * sample_numel_, augment_draw_key(opt_.seed, epoch_, idx[i]))
                   : dataset_.read(first + i, x + i * sample_numel_);
    };
    // Samples [begin, end) in order, each thread telling the data set (will_read: a cache prefetch of the bytes, for
    // the core that issues it) about its own samples a few ahead.
    auto fill_range = [&](int64_t begin, int64_t end) {
        constexpr int64_t kAhead = 4;
        auto hint = [&](int64_t i) {
            if (i < end) dataset_.will_read(idx ? idx[i] : first + i);
        };
        for (int64_t i = begin; i < begin + kAhead; ++i) hint(i);
        for (int64_t i = begin; i < end; ++i) {
            hint(i + kAhead);
            read(i);
        }
    };
    if (workers <= 1) return fill_range(0, n);
    if (costly)  // decoding files: one sample at a time, so a slow file or core delays only its own sample
        return pool_->run(n, static_cast<int>(workers), read);
    // In-memory samples of similar cost: contiguous shares, each with its own prefetch hints.
    pool_->run(workers, static_cast<int>(workers),
               [&](int64_t w) { fill_range(n * w / workers, n * (w + 1) / workers); });
}

void ShardedLoader::worker() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
        cv_.wait(lk, [this] { return quit_ || want_step_ >= 0; });
        if (quit_) return;
        const int64_t s = std::exchange(want_step_, -1);
        const Share share = opt_.mode == LoaderMode::Train ? share_of(s) : Share{};
        busy_ = true;
        lk.unlock();
        std::exception_ptr err;
        const auto t0 = Clock::now();
        try {
            fill(s, share, ready_);
        } catch (...) {
            err = std::current_exception();
        }
        const double took = seconds_since(t0);
        lk.lock();
        fill_seconds_ += took;
        ++fills_;
        busy_ = false;
        if (err) {
            error_ = err;
            error_step_ = s;
            ready_step_ = -1;
        } else {
            ready_step_ = s;
        }
        cv_.notify_all();
    }
}

void ShardedLoader::stop_worker() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard<std::mutex> lk(mu_);
        quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

}  // namespace ringtrain::data
