#include "ringtrain/sync/consistency.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/memory.hpp"

namespace ringtrain::sync {

namespace {

constexpr const char* kMissing = "(none)";
constexpr size_t kValueChars = 160;  // longer values are cut in messages (a model file's array, a long path)
constexpr size_t kGroupsShown = 4;

std::string shown(const std::string& v) {
    if (v.empty()) return "\"\"";
    return v.size() <= kValueChars ? v : v.substr(0, kValueChars) + "...";
}

// "0-2, 5": ascending ranks as ranges.
std::string rank_ranges(const std::vector<int>& ranks) {
    std::string s;
    for (size_t i = 0; i < ranks.size();) {
        size_t j = i;
        while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
        // Appended piece by piece: `"literal" + std::string&&` trips GCC 12's -Wrestrict false positive (PR 105329).
        if (!s.empty()) s += ", ";
        s += std::to_string(ranks[i]);
        if (j > i) s.append("-").append(std::to_string(ranks[j]));
        i = j + 1;
    }
    return s;
}

// Facts as bytes for the exchange: per fact, the key's and the value's length (8 bytes each) and text. Any bytes
// (paths need not be UTF-8), and nothing here can throw on one rank only.
std::string serialize(const Facts& facts) {
    std::string s;
    auto put = [&s](const std::string& t) {
        const uint64_t n = t.size();
        s.append(reinterpret_cast<const char*>(&n), sizeof n);
        s += t;
    };
    for (const Fact& f : facts) {
        put(f.key);
        put(f.value);
    }
    return s;
}

Facts deserialize(const std::string& s) {
    Facts facts;
    size_t at = 0;
    auto take = [&](std::string& t) {
        uint64_t n = 0;
        if (s.size() - at < sizeof n) return false;
        std::memcpy(&n, s.data() + at, sizeof n);
        at += sizeof n;
        if (s.size() - at < n) return false;
        t.assign(s, at, n);
        at += n;
        return true;
    };
    Fact f;
    while (at < s.size() && take(f.key) && take(f.value)) facts.push_back(f);
    return facts;
}

}  // namespace

void append_json_facts(const nlohmann::json& doc, const std::string& prefix, Facts& out) {
    const auto structured = [](const nlohmann::json& a) {
        return std::any_of(a.begin(), a.end(), [](const nlohmann::json& e) { return e.is_structured(); });
    };
    if (doc.is_object() && !doc.empty()) {
        for (const auto& [k, v] : doc.items()) append_json_facts(v, prefix.empty() ? k : prefix + "." + k, out);
    } else if (doc.is_array() && structured(doc)) {
        for (size_t i = 0; i < doc.size(); ++i) append_json_facts(doc[i], prefix + "[" + std::to_string(i) + "]", out);
        out.push_back({prefix + " (elements)", std::to_string(doc.size())});
    } else {
        out.push_back({prefix, doc.is_string() ? doc.get<std::string>()
                                               : doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)});
    }
}

void append_parameter_facts(const std::vector<nn::Parameter*>& params, Facts& out) {
    out.push_back({"model parameters", std::to_string(params.size())});
    for (size_t i = 0; i < params.size(); ++i)
        out.push_back({"model parameter #" + std::to_string(i),
                       "'" + params[i]->name + "' " + shape_string(params[i]->value.shape())});
}

std::optional<std::string> first_disagreement(const std::vector<Facts>& per_rank) {
    std::vector<std::string> keys;
    std::set<std::string> seen;
    std::vector<std::map<std::string, std::string>> values(per_rank.size());
    for (size_t r = 0; r < per_rank.size(); ++r)
        for (const Fact& f : per_rank[r]) {
            values[r].emplace(f.key, f.value);
            if (seen.insert(f.key).second) keys.push_back(f.key);
        }
    for (const std::string& key : keys) {
        std::vector<std::pair<std::string, std::vector<int>>> groups;  // value -> ranks, by first rank
        for (size_t r = 0; r < values.size(); ++r) {
            const auto it = values[r].find(key);
            const std::string v = it == values[r].end() ? kMissing : it->second;
            auto g = std::find_if(groups.begin(), groups.end(), [&v](const auto& e) { return e.first == v; });
            if (g == groups.end()) groups.push_back({v, {}}), g = groups.end() - 1;
            g->second.push_back(static_cast<int>(r));
        }
        if (groups.size() < 2) continue;
        std::string text = "ranks disagree on " + key + ": ";
        for (size_t i = 0; i < groups.size() && i < kGroupsShown; ++i) {
            const auto& [v, ranks] = groups[i];
            if (i) text += ", ";
            text.append(ranks.size() == 1 ? "rank " : "ranks ").append(rank_ranges(ranks));
            text.append(ranks.size() == 1 ? " has " : " have ").append(shown(v));
        }
        if (groups.size() > kGroupsShown) text += ", and " + std::to_string(groups.size() - kGroupsShown) + " other values";
        return text;
    }
    return std::nullopt;
}

void require_same_facts(comm::Communicator& comm, const Facts& mine) {
    const std::string text = serialize(mine);
    const std::vector<uint64_t> digests = comm.allgather(fnv1a(text.data(), text.size()));
    if (std::all_of(digests.begin(), digests.end(), [&](uint64_t d) { return d == digests[0]; })) return;
    std::vector<Facts> per_rank;
    for (const std::string& t : comm::allgather_strings(comm, text)) per_rank.push_back(deserialize(t));
    const auto diff = first_disagreement(per_rank);
    throw CollectiveInputError((diff ? *diff : std::string("the ranks' set-up differs (digests differ)")) +
                               "; every rank must run the same config");
}

void broadcast_from_root(comm::Communicator& comm, const std::vector<nn::Parameter*>& params,
                         const std::vector<std::pair<std::string, Tensor*>>& state) {
    if (comm.size() == 1) return;
    // MPI sees host memory only: device tensors go through a host copy.
    auto broadcast = [&](Tensor& t) {
        if (t.device() == Device::CPU) {
            comm.broadcast(t.span(), 0);
            return;
        }
        Tensor host = t.to(Device::CPU);
        comm.broadcast(host.span(), 0);
        t.copy_from(host);
    };
    for (auto* p : params) broadcast(p->value);
    for (const auto& [name, t] : state) broadcast(*t);
}

namespace {
// A host copy of `t`'s values (the communicator reads host memory only).
std::vector<float> host_values(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    copy_floats(v.data(), Device::CPU, t.data(), t.device(), v.size());
    return v;
}
}  // namespace

std::vector<std::vector<float>> gather_to_root(comm::Communicator& comm, const std::vector<Tensor*>& tensors) {
    std::vector<std::vector<float>> all;
    all.reserve(tensors.size());
    for (const Tensor* t : tensors) {
        const std::vector<float> mine = host_values(*t);
        all.push_back(comm.gather(mine, 0));
    }
    return all;
}

void scatter_from_root(comm::Communicator& comm, const std::vector<std::vector<float>>& values,
                       const std::vector<Tensor*>& tensors) {
    const bool root = comm.rank() == 0;
    const size_t ranks = static_cast<size_t>(comm.size());
    if (root && values.size() != tensors.size())
        throw Error("scatter_from_root: " + std::to_string(values.size()) + " value lists for " +
                    std::to_string(tensors.size()) + " tensors");
    for (size_t i = 0; i < tensors.size(); ++i) {
        Tensor& t = *tensors[i];
        const auto n = static_cast<size_t>(t.numel());
        if (root && values[i].size() != n * ranks)
            throw Error("scatter_from_root: tensor " + std::to_string(i) + " has " + std::to_string(values[i].size()) +
                        " values for " + std::to_string(ranks) + " ranks of " + std::to_string(n));
        if (root) copy_floats(t.data(), t.device(), values[i].data(), Device::CPU, n);
        std::vector<float> part(n);
        for (size_t r = 1; r < ranks; ++r) {
            if (root) std::copy_n(values[i].begin() + static_cast<std::ptrdiff_t>(r * n), n, part.begin());
            comm.broadcast(std::span<float>(part), 0);
            if (static_cast<size_t>(comm.rank()) == r) copy_floats(t.data(), t.device(), part.data(), Device::CPU, n);
        }
    }
}

void run_then_agree(comm::Communicator& comm, const std::function<void()>& local_work) {
    std::exception_ptr error;
    double code = 0;
    try {
        local_work();
    } catch (const InputError&) {
        error = std::current_exception();
        code = 2;
    } catch (...) {
        error = std::current_exception();
        code = 1;
    }
    double worst = code;
    comm.allreduce(std::span<double>(&worst, 1), comm::ReduceOp::Max);
    if (error) {
        // Every rank now knows that set-up failed (the others throw PeerFailure below), so this rank's own error can
        // end the job cleanly too: no MPI_Abort, no launcher banner around the one line that says what is wrong.
        try {
            std::rethrow_exception(error);
        } catch (const CollectiveInputError&) {
            throw;
        } catch (const CollectiveError&) {
            throw;
        } catch (const PeerFailure&) {
            throw;
        } catch (const InputError& e) {
            throw CollectiveInputError(e.what());
        } catch (const std::exception& e) {
            throw CollectiveError(e.what());
        }
    }
    if (worst > 0)
        throw PeerFailure("another rank failed during set-up (its message says why)", static_cast<int>(worst));
}

uint64_t parameter_layout_hash(const std::vector<nn::Parameter*>& params) {
    uint64_t h = kFnv1aOffsetBasis;
    for (const auto* p : params) {
        h = fnv1a(p->name.data(), p->name.size(), h);
        for (int64_t d : p->value.shape()) h = fnv1a(&d, sizeof d, h);
        const uint64_t end = p->value.shape().size();  // separates one parameter from the next
        h = fnv1a(&end, sizeof end, h);
    }
    return h;
}

uint64_t parameter_value_hash(const std::vector<nn::Parameter*>& params) {
    uint64_t h = kFnv1aOffsetBasis;
    for (const auto* p : params) {
        const Tensor host = p->value.to(Device::CPU);
        h = fnv1a(host.data(), host.numel() * sizeof(float), h);
    }
    return h;
}

}  // namespace ringtrain::sync
