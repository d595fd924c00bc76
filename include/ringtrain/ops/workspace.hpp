// Scratch memory an op may need (im2col columns, cuDNN workspace), owned by the caller and reused.
// Layers keep one Workspace each, so the step loop does not allocate once shapes are stable.
#pragma once

#include <cstddef>
#include <memory>

#include "ringtrain/core/tensor.hpp"

namespace ringtrain::ops {

// State a backend keeps per call site between steps (the oneDNN primitives and buffers made for a layer's shapes).
struct WorkspaceCache {
    virtual ~WorkspaceCache() = default;
};

class Workspace {
public:
    explicit Workspace(Device device = Device::CPU) : device_(device) {}
    // Returns at least `count` floats; grows (never shrinks) the buffer.
    float* floats(size_t count) {
        if (static_cast<int64_t>(count) > buffer_.numel()) buffer_ = Tensor({static_cast<int64_t>(count)}, device_);
        return buffer_.data();
    }
    Device device() const { return device_; }
    // Empty until a backend puts its state here; lives as long as the layer that owns the workspace.
    std::unique_ptr<WorkspaceCache>& backend_cache() { return cache_; }

private:
    Device device_;
    Tensor buffer_;
    std::unique_ptr<WorkspaceCache> cache_;
};

}  // namespace ringtrain::ops
