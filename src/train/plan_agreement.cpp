// facts_to_agree (see the header).
#include "plan_agreement.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/sync/bucket_layout.hpp"

namespace ringtrain::train::detail {

namespace {

// Keys only rank 0 acts on, so other ranks may differ harmlessly: output.progress (how rank 0 draws progress) and
// output.dir (only rank 0 reads checkpoints and writes summary, metrics and checkpoints there; on separate file
// systems the other ranks' copies of that path do not matter). Every other key shapes the collectives (sizes,
// counts, their order), the numbers every rank computes, or what every rank writes; paths are compared as written
// too, because every rank of one job runs one config (the contents behind them are compared below as well: one path
// may hold different files on two hosts).
constexpr const char* kPerRankKeys[] = {"output.progress", "output.dir"};

std::string joined(const std::vector<size_t>& v) {
    std::string s;
    for (size_t x : v) {
        if (!s.empty()) s += ", ";
        s += std::to_string(x);
    }
    return s;
}

bool is_per_rank_key(const std::string& key) {
    return std::find(std::begin(kPerRankKeys), std::end(kPerRankKeys), key) != std::end(kPerRankKeys);
}

// The plan key by key (less the per-rank keys) and the model file as parsed.
void append_plan_and_model(const RunPlan& plan, const std::string& model_path, sync::Facts& facts) {
    sync::Facts plan_facts;
    sync::append_json_facts(plan.to_json(), "", plan_facts);
    for (auto& f : plan_facts)
        if (!is_per_rank_key(f.key)) facts.push_back(std::move(f));
    std::ifstream in(model_path);
    sync::append_json_facts(nlohmann::json::parse(in, nullptr, false), "model", facts);
}

// A file's size and the hash of its first and last 4 KiB (file_fingerprint), or why it cannot be read.
std::string file_fingerprint_text(const std::string& path) {
    try {
        return file_fingerprint(path);
    } catch (const Error& e) {
        return std::string("unreadable (") + e.what() + ")";
    }
}

}  // namespace

std::string file_fingerprint(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw InputError(path + ": cannot be read");
    const auto size = static_cast<int64_t>(in.tellg());
    constexpr int64_t kEdge = 4096;
    std::string head(static_cast<size_t>(std::min(size, kEdge)), '\0'), tail(head.size(), '\0');
    in.seekg(0);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    in.seekg(size - static_cast<int64_t>(tail.size()));
    in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
    if (!in) throw InputError(path + ": cannot be read");
    return std::to_string(size) + " bytes, first and last 4 KiB fnv1a " +
           hex16(fnv1a(tail.data(), tail.size(), fnv1a(head.data(), head.size())));
}

sync::Facts sparse_facts_to_agree(const RunPlan& plan, const std::string& model_path, int64_t num_features,
                                  const std::vector<nn::Parameter*>& tensors, const std::string& optimizer) {
    sync::Facts facts;
    append_plan_and_model(plan, model_path, facts);
    facts.push_back({"feature count (from the data)", std::to_string(num_features)});
    facts.push_back({"training file", file_fingerprint_text(plan.data.train_file)});
    facts.push_back({"test file", file_fingerprint_text(plan.data.test_file)});
    sync::append_parameter_facts(tensors, facts);
    facts.push_back({"optimizer", optimizer});
    return facts;
}

sync::Facts facts_to_agree(const RunPlan& plan, const std::string& model_path, const Datasets& data,
                           const nn::Model& model, bool contents) {
    sync::Facts facts;
    // Model::from_file has just read the model, so it parses: "model.layers[5].out_features".
    append_plan_and_model(plan, model_path, facts);

    facts.push_back({"training set size", std::to_string(data.train->size())});
    facts.push_back({"test set size", std::to_string(data.test->size())});
    facts.push_back({"training sample shape", shape_string(data.train->sample_shape())});
    facts.push_back({"test sample shape", shape_string(data.test->sample_shape())});
    facts.push_back({"training set classes", std::to_string(data.train->num_classes())});
    // The contents too: the same path can hold different files on two hosts (a stale copy, shifted labels).
    if (contents) {
        const std::string what = " (a fingerprint of its files or samples: one path can hold other data on another host)";
        facts.push_back({"the training data" + what, hex16(data.train->fingerprint())});
        facts.push_back({"the test data" + what, hex16(data.test->fingerprint())});
    }

    const auto& params = model.parameters();
    sync::append_parameter_facts(params, facts);
    // The gradient buckets GradientSync starts with (a cycle-time layout is rank 0's, broadcast after step 1).
    std::vector<size_t> sizes;
    for (const auto* p : params) sizes.push_back(static_cast<size_t>(p->value.numel()));
    const auto layout = sync::BucketLayout::by_size(sizes, static_cast<size_t>(plan.sync.fusion_bytes));
    facts.push_back({"gradient buckets (tensors in each)", joined(layout.tensors_per_bucket())});
    return facts;
}

}  // namespace ringtrain::train::detail
