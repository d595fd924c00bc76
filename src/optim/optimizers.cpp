#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/optimizer.hpp"

namespace ringtrain::optim {

namespace {

// One state tensor per parameter, zero-initialised, named "<param>.<suffix>".
struct StateSlot {
    std::vector<Tensor> tensors;
    std::vector<std::string> names;
    StateSlot(const std::vector<nn::Parameter*>& params, const std::string& suffix) {
        for (auto* p : params) {
            tensors.push_back(Tensor::zeros(p->value.shape(), p->value.device()));
            names.push_back(p->name + "." + suffix);
        }
    }
    void append_to(std::vector<std::pair<std::string, Tensor*>>& out) {
        for (size_t i = 0; i < tensors.size(); ++i) out.emplace_back(names[i], &tensors[i]);
    }
};

class Sgd : public Optimizer {
public:
    Sgd(const OptimizerOptions& o, std::vector<nn::Parameter*> params)
        : params_(std::move(params)), velocity_(params_, "momentum_buffer") {
        p_.momentum = o.momentum;
        p_.nesterov = o.nesterov;
        p_.weight_decay = o.weight_decay;
    }
    std::string name() const override { return "sgd"; }
    void step(float lr) override {
        p_.lr = lr;
        for (size_t i = 0; i < params_.size(); ++i)
            ops::sgd_update(params_[i]->value, params_[i]->grad, velocity_.tensors[i], p_);
        ++steps_;
    }
    std::vector<std::pair<std::string, Tensor*>> state() override {
        std::vector<std::pair<std::string, Tensor*>> s;
        if (p_.momentum != 0.0f) velocity_.append_to(s);
        return s;
    }

private:
    std::vector<nn::Parameter*> params_;
    StateSlot velocity_;
    ops::SgdParams p_;
};

class Adam : public Optimizer {
public:
    Adam(const OptimizerOptions& o, std::vector<nn::Parameter*> params)
        : params_(std::move(params)), m_(params_, "exp_avg"), v_(params_, "exp_avg_sq") {
        p_.beta1 = o.beta1;
        p_.beta2 = o.beta2;
        p_.eps = o.eps;
        p_.weight_decay = o.weight_decay;
    }
    std::string name() const override { return "adam"; }
    void step(float lr) override {
        ++steps_;
        p_.lr = lr;
        p_.step = steps_;
        for (size_t i = 0; i < params_.size(); ++i)
            ops::adam_update(params_[i]->value, params_[i]->grad, m_.tensors[i], v_.tensors[i], p_);
    }
    std::vector<std::pair<std::string, Tensor*>> state() override {
        std::vector<std::pair<std::string, Tensor*>> s;
        m_.append_to(s);
        v_.append_to(s);
        return s;
    }

private:
    std::vector<nn::Parameter*> params_;
    StateSlot m_, v_;
    ops::AdamParams p_;
};

class Adadelta : public Optimizer {
public:
    Adadelta(const OptimizerOptions& o, std::vector<nn::Parameter*> params)
        : params_(std::move(params)), sq_(params_, "square_avg"), acc_(params_, "acc_delta") {
        p_.rho = o.rho;
        p_.eps = o.eps;
        p_.weight_decay = o.weight_decay;
    }
    std::string name() const override { return "adadelta"; }
    void step(float lr) override {
        p_.lr = lr;
        for (size_t i = 0; i < params_.size(); ++i)
            ops::adadelta_update(params_[i]->value, params_[i]->grad, sq_.tensors[i], acc_.tensors[i], p_);
        ++steps_;
    }
    std::vector<std::pair<std::string, Tensor*>> state() override {
        std::vector<std::pair<std::string, Tensor*>> s;
        sq_.append_to(s);
        acc_.append_to(s);
        return s;
    }

private:
    std::vector<nn::Parameter*> params_;
    StateSlot sq_, acc_;
    ops::AdadeltaParams p_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& opt, const std::vector<nn::Parameter*>& params) {
    if (opt.name == "sgd") {
        if (opt.nesterov && opt.momentum <= 0.0f)
            throw InputError("optimizer.nesterov: Nesterov momentum needs optimizer.momentum > 0");
        return std::make_unique<Sgd>(opt, params);
    }
    if (opt.name == "adam") return std::make_unique<Adam>(opt, params);
    if (opt.name == "adadelta") return std::make_unique<Adadelta>(opt, params);
    throw InputError("optimizer.name: unknown optimizer '" + opt.name + "'; use sgd, adam or adadelta");
}

}  // namespace ringtrain::optim
