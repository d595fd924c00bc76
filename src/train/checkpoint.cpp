#include "ringtrain/train/checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ringtrain/core/error.hpp"

namespace ringtrain::train {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {
constexpr char kMagic[8] = {'R', 'T', 'C', 'K', 'P', 'T', '0', '1'};

std::vector<std::pair<std::string, Tensor*>> all_tensors(const std::vector<nn::Parameter*>& params,
                                                         optim::Optimizer* opt) {
    std::vector<std::pair<std::string, Tensor*>> t;
    for (auto* p : params) t.emplace_back(p->name, &p->value);
    if (opt)
        for (auto& s : opt->state()) t.push_back(s);
    return t;
}
}  // namespace

void save_checkpoint(const std::string& path, const std::vector<nn::Parameter*>& params, optim::Optimizer* opt,
                     const LoopState& s) {
    json header;
    header["format"] = "ringtrain-checkpoint";
    header["version"] = 1;
    header["epoch"] = s.epoch;
    header["step_in_epoch"] = s.step_in_epoch;
    header["global_step"] = s.global_step;
    header["epoch_loss_sum"] = s.epoch_loss_sum;
    header["epoch_samples"] = s.epoch_samples;
    header["rng_states"] = s.rng_states;
    header["extra"] = s.extra;
    header["optimizer"] = opt ? json{{"name", opt->name()}, {"steps", opt->steps_taken()}} : json(nullptr);
    json list = json::array();
    const auto tensors = all_tensors(params, opt);
    for (const auto& [name, t] : tensors) list.push_back({{"name", name}, {"shape", t->shape()}});
    header["tensors"] = list;
    const std::string text = header.dump();

    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw Error(tmp + ": cannot write checkpoint; check that output.dir is writable");
        const uint64_t len = text.size();
        out.write(kMagic, sizeof kMagic);
        out.write(reinterpret_cast<const char*>(&len), sizeof len);
        out.write(text.data(), static_cast<std::streamsize>(text.size()));
        for (const auto& [name, t] : tensors) {
            Tensor host = t->device() == Device::CPU ? *t : Tensor(t->shape());
            if (t->device() != Device::CPU) host.copy_from(*t);
            out.write(reinterpret_cast<const char*>(host.data()), static_cast<std::streamsize>(host.numel() * 4));
        }
        if (!out.flush()) throw Error(tmp + ": checkpoint write failed (disk full?)");
    }
    fs::rename(tmp, path);
}

LoopState load_checkpoint(const std::string& path, const std::vector<nn::Parameter*>& params,
                          optim::Optimizer* opt) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(path + ": checkpoint not found");
    char magic[8];
    uint64_t len = 0;
    in.read(magic, sizeof magic);
    in.read(reinterpret_cast<char*>(&len), sizeof len);
    if (!in || std::memcmp(magic, kMagic, sizeof kMagic) != 0 || len > (1u << 30))
        throw InputError(path + ": not a ringtrain checkpoint (bad magic); pass a ckpt-*.bin file written by ringtrain");
    std::string text(len, '\0');
    in.read(text.data(), static_cast<std::streamsize>(len));
    json header;
    try {
        header = json::parse(text);
    } catch (const json::exception& e) {
        throw InputError(path + ": corrupt checkpoint header: " + e.what());
    }
    if (opt && header["optimizer"].is_object() && header["optimizer"]["name"] != opt->name())
        throw InputError(path + ": checkpoint was written with optimizer " + header["optimizer"]["name"].dump() +
                         " but the config uses " + opt->name() + "; use the same optimizer to resume");
    // Optimizer state is only restored when the checkpoint has it (eval passes no optimizer).
    const auto want = all_tensors(params, opt);
    const json& list = header.at("tensors");
    size_t idx = 0;
    for (const auto& entry : list) {
        const std::string name = entry.at("name");
        const Shape shape = entry.at("shape").get<Shape>();
        Tensor* dst = nullptr;
        if (idx < want.size() && want[idx].first == name) dst = want[idx++].second;
        const int64_t n = shape_numel(shape);
        if (dst == nullptr) {
            if (idx < params.size())
                throw InputError(path + ": checkpoint has tensor '" + name + "' where the model expects '" +
                                 want[idx].first + "'; was it written for another model?");
            in.seekg(n * 4, std::ios::cur);  // optimizer state not wanted here
            continue;
        }
        if (dst->shape() != shape)
            throw InputError(path + ": tensor '" + name + "' has shape " + shape_string(shape) + " in the checkpoint but " +
                             shape_string(dst->shape()) + " in the model");
        Tensor host(shape);
        in.read(reinterpret_cast<char*>(host.data()), n * 4);
        if (!in) throw InputError(path + ": checkpoint is truncated (while reading '" + name + "')");
        dst->copy_from(host);
    }
    if (idx != want.size())
        throw InputError(path + ": checkpoint lacks tensor '" + want[idx].first +
                         "'; it was written for another model or optimizer");
    LoopState s;
    s.epoch = header.at("epoch");
    s.step_in_epoch = header.at("step_in_epoch");
    s.global_step = header.at("global_step");
    s.epoch_loss_sum = header.value("epoch_loss_sum", 0.0);
    s.epoch_samples = header.value("epoch_samples", 0.0);
    s.rng_states = header.at("rng_states").get<std::vector<Rng::State>>();
    s.extra = header.value("extra", json::object());
    if (opt && header["optimizer"].is_object()) opt->set_steps_taken(header["optimizer"]["steps"].get<int64_t>());
    return s;
}

std::string checkpoint_file_name(int64_t global_step) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "ckpt-%09lld.bin", static_cast<long long>(global_step));
    return buf;
}

void publish_checkpoint(const std::string& dir, const std::string& file_name, int64_t keep) {
    {
        std::ofstream out(dir + "/latest.tmp", std::ios::trunc);
        out << file_name << '\n';
    }
    fs::rename(dir + "/latest.tmp", dir + "/latest");
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        if (n.rfind("ckpt-", 0) == 0 && n.size() > 4 && n.substr(n.size() - 4) == ".bin") files.push_back(n);
    }
    std::sort(files.begin(), files.end());
    for (size_t i = 0; i + keep < files.size(); ++i)
        if (files[i] != file_name) fs::remove(fs::path(dir) / files[i]);
}

std::string latest_checkpoint(const std::string& dir) {
    std::ifstream in(dir + "/latest");
    std::string name;
    if (!in || !std::getline(in, name) || name.empty()) return "";
    const std::string path = dir + "/" + name;
    return fs::exists(path) ? path : "";
}

}  // namespace ringtrain::train
