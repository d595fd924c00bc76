// LossTotals (ops.hpp): the host reads the device-side record only when it needs the numbers.
#include <cstring>

#include "cuda/kernels.hpp"  // the record's layout (plain struct; no CUDA headers)
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"
#include "ringtrain/ops/ops.hpp"

namespace ringtrain::ops {

namespace {
using Record = cuda::kernels::ReduceResult;
constexpr int64_t kRecordFloats = 8;
static_assert(sizeof(Record) <= kRecordFloats * sizeof(float));

void write_empty_record(Tensor& t) {
    float words[kRecordFloats] = {};
    Record r{0.0, 0, ~0ull};
    std::memcpy(words, &r, sizeof r);
    copy_floats(t.data(), t.device(), words, Device::CPU, kRecordFloats);
}
}  // namespace

void LossTotals::add(const LossStats& s) {
    host_.loss_sum += s.loss_sum;
    host_.correct += s.correct;
    host_pending_ = true;
}

float* LossTotals::device_totals(Device device, const std::string& bad_input) {
    if (device_.empty() || device_.device() != device) {
        if (device_pending_) throw Error("LossTotals: take() the totals before using them on another device");
        device_ = Tensor({kRecordFloats}, device);
        write_empty_record(device_);
    }
    bad_input_ = bad_input;
    device_pending_ = true;
    return device_.data();
}

LossStats LossTotals::take() {
    LossStats out = host_;
    host_ = {};
    host_pending_ = false;
    if (device_pending_) {
        float words[kRecordFloats];
        copy_floats(words, Device::CPU, device_.data(), device_.device(), kRecordFloats);  // waits for the device
        Record r;
        std::memcpy(&r, words, sizeof r);
        write_empty_record(device_);
        device_pending_ = false;
        if (r.first_bad != ~0ull)
            throw InputError(bad_input_ + " (row " + std::to_string(r.first_bad) +
                             " of a batch since the loss was last read)");
        out.loss_sum += r.sum;
        out.correct += static_cast<int64_t>(r.count);
    }
    return out;
}

}  // namespace ringtrain::ops
