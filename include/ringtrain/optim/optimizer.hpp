// Optimizers (SGD with momentum/Nesterov/weight decay, Adam, Adadelta) over a fixed list of parameters.
// State tensors are exposed by name so checkpoints can save them and rank 0 can broadcast them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringtrain/nn/layer.hpp"
#include "ringtrain/ops/ops.hpp"

namespace ringtrain::optim {

struct OptimizerOptions {
    std::string name = "sgd";  // sgd | adam | adadelta
    float momentum = 0.0f;
    bool nesterov = false;
    float weight_decay = 0.0f;
    float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam (eps also adadelta if set there)
    float rho = 0.9f;                                  // adadelta
};

class Optimizer {
public:
    virtual ~Optimizer() = default;
    virtual std::string name() const = 0;
    // One update of every parameter from its gradient, with learning rate lr.
    virtual void step(float lr) = 0;
    // State tensors (e.g. "conv1.weight.exp_avg"), in a fixed order.
    virtual std::vector<std::pair<std::string, Tensor*>> state() = 0;
    int64_t steps_taken() const { return steps_; }
    void set_steps_taken(int64_t s) { steps_ = s; }

protected:
    int64_t steps_ = 0;
};

// InputError for an unknown name or bad option values.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& opt, const std::vector<nn::Parameter*>& params);

}  // namespace ringtrain::optim
