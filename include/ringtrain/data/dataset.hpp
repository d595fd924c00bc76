// A Dataset is an indexable collection of (sample, label) pairs held in memory or read on demand.
// Readers (IDX, CIFAR-10, libsvm, image folders, synthetic) implement it; the loader only sees this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/core/tensor.hpp"

namespace ringtrain::data {

class Dataset {
public:
    virtual ~Dataset() = default;
    virtual int64_t size() const = 0;
    // Shape of one sample, e.g. {1, 28, 28} for an image or {784} for a flat vector.
    virtual Shape sample_shape() const = 0;
    virtual int64_t num_classes() const = 0;
    // Writes sample `index` (shape_numel(sample_shape()) floats) to x and returns its label.
    // Must be safe to call from the prefetch thread while other threads call it too.
    virtual float read(int64_t index, float* x) const = 0;
    // A training read: as read(), with `draw_key` seeding the sample's random augmentation. The loader derives the
    // key from the run seed, the epoch and the sample index (augment_draw_key), so a sample's draw does not depend on
    // which rank, worker thread or restart reads it. Readers without augmentation ignore it.
    virtual float read_training(int64_t index, float* x, uint64_t draw_key) const {
        (void)draw_key;
        return read(index, x);
    }
    // Whether one read costs enough (decoding a file) that the loader should split every batch over its workers and
    // always prefetch, however small the batch. In-memory readers: false.
    virtual bool reads_are_costly() const { return false; }
    // The name of each label, where the data set has names (image folders: the class sub-folders); else empty.
    virtual std::vector<std::string> class_names() const { return {}; }
    // A hint that read(index) comes soon (the loader gives it a few samples ahead): in-memory readers can start
    // fetching the sample's bytes into cache. Shuffled reads are otherwise a string of cache misses.
    virtual void will_read(int64_t index) const {}
    // For messages and `ringtrain info`: where the data came from.
    virtual std::string description() const = 0;
    // A digest of the data for the ranks' start-up agreement: one path can hold different files on two hosts, and
    // equal sizes would hide it. It must not depend on the host (the stored bytes, not normalised floats): IDX and
    // CIFAR-10 hash their stored bytes, image folders every file's path and label and 64 files' sizes, synthetic
    // sets nothing (their config is compared). The default: the values and labels of up to 64 samples spread over
    // the set (read()), for readers with nothing better.
    virtual uint64_t fingerprint() const;
};

}  // namespace ringtrain::data
