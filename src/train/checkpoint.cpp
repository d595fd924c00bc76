#include "ringtrain/train/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ringtrain/core/crc32c.hpp"
#include "ringtrain/sync/consistency.hpp"

namespace ringtrain::train {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {
constexpr char kMagic[8] = {'R', 'T', 'C', 'K', 'P', 'T', '0', '2'};
constexpr char kMagicV1[8] = {'R', 'T', 'C', 'K', 'P', 'T', '0', '1'};
constexpr int kVersion = 2;
constexpr uint64_t kPrefixBytes = sizeof kMagic + sizeof(uint64_t);  // magic, header length
constexpr uint64_t kFooterBytes = sizeof(uint32_t);                   // CRC-32C of the prefix and header
constexpr uint64_t kMaxHeaderBytes = 1u << 30;

std::vector<std::pair<std::string, Tensor*>> all_tensors(const std::vector<nn::Parameter*>& params,
                                                         optim::Optimizer* opt) {
    std::vector<std::pair<std::string, Tensor*>> t;
    for (auto* p : params) t.emplace_back(p->name, &p->value);
    if (opt)
        for (auto& s : opt->state()) t.push_back(s);
    return t;
}

std::span<const std::byte> bytes_of(const float* p, int64_t n) {
    return std::as_bytes(std::span<const float>(p, static_cast<size_t>(n)));
}

// CRC-32C of the bytes before the tensors: the magic, the header length and the header text.
uint32_t prefix_crc(const char* magic, uint64_t len, const std::string& text) {
    uint32_t crc = crc32c(std::as_bytes(std::span<const char>(magic, sizeof kMagic)));
    crc = crc32c(std::as_bytes(std::span<const uint64_t>(&len, 1)), crc);
    return crc32c(std::as_bytes(std::span<const char>(text.data(), text.size())), crc);
}

// Makes the file's data durable before the rename publishes it (a crash after the rename must not leave a
// checkpoint whose blocks never reached the disk).
void sync_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    const bool ok = fd >= 0 && ::fsync(fd) == 0;
    if (fd >= 0) ::close(fd);
    if (!ok) throw Error(path + ": cannot sync the checkpoint to disk: " + std::strerror(errno));
}

// Writes `path` through path.tmp, a sync and a rename; the temporary is removed when anything fails (disk full).
template <class WriteBody>
void write_atomically(const std::string& path, WriteBody&& body) {
    const std::string tmp = path + ".tmp";
    try {
        {
            std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
            if (!out) throw Error(tmp + ": cannot write; check that output.dir is writable");
            body(out);
            out.flush();
            out.close();
            if (!out) throw Error(tmp + ": write failed (disk full?); the previous checkpoint is kept");
        }
        sync_file(tmp);
        std::error_code ec;
        fs::rename(tmp, path, ec);
        if (ec) throw Error(tmp + ": cannot rename to " + path + ": " + ec.message());
        // The rename itself reaches the disk with the folder's entry; best effort, as not every file system
        // can sync a folder (the file's own data is already durable).
        const int dir_fd = ::open(fs::path(path).parent_path().c_str(), O_RDONLY | O_DIRECTORY);
        if (dir_fd >= 0) {
            ::fsync(dir_fd);
            ::close(dir_fd);
        }
    } catch (...) {
        std::error_code ignored;
        fs::remove(tmp, ignored);
        throw;
    }
}

// ---- reading the header: every key checked for presence and type, so a crafted header is one clear message ----

class HeaderReader {
public:
    HeaderReader(const json& h, const std::string& path) : h_(h), path_(path) {}

    const json& at(const char* key, bool (json::*is)() const, const char* what) const {
        const auto it = h_.find(key);
        if (it == h_.end()) fail("lacks the key '" + std::string(key) + "'");
        if (!((*it).*is)()) fail("key '" + std::string(key) + "' is not " + what + " (" + it->type_name() + ")");
        return *it;
    }
    int64_t integer(const char* key, int64_t min) const {
        const json& v = at(key, &json::is_number_integer, "an integer");
        if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(range(key, min));
        const int64_t x = v.get<int64_t>();
        if (x < min) fail(range(key, min));
        return x;
    }
    double number(const char* key) const {
        const double x = at(key, &json::is_number, "a number").get<double>();
        if (!std::isfinite(x)) fail("key '" + std::string(key) + "' is not finite");
        return x;
    }
    [[noreturn]] void fail(const std::string& what) const {
        throw CheckpointUnreadable(path_ + ": checkpoint header " + what +
                                   "; the file is damaged or was not written by ringtrain");
    }

private:
    static std::string range(const char* key, int64_t min) {
        return "key '" + std::string(key) + "' is out of range (must be >= " + std::to_string(min) + ")";
    }
    const json& h_;
    const std::string& path_;
};

struct TensorEntry {
    std::string name;
    Shape shape;
    int64_t numel = 0;
    uint32_t crc = 0;
};

std::vector<TensorEntry> read_tensor_list(const HeaderReader& r, uint64_t file_bytes) {
    std::vector<TensorEntry> list;
    for (const json& e : r.at("tensors", &json::is_array, "an array")) {
        TensorEntry t;
        const std::string where = "tensor entry " + std::to_string(list.size());
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("shape") ||
            !e["shape"].is_array() || !e.contains("crc32c") || !e["crc32c"].is_number_unsigned() ||
            e["crc32c"].get<uint64_t>() > UINT32_MAX)
            r.fail(where + " is not {\"name\": string, \"shape\": [sizes], \"crc32c\": u32}");
        t.name = e["name"].get<std::string>();
        t.crc = static_cast<uint32_t>(e["crc32c"].get<uint64_t>());
        t.numel = 1;
        for (const json& d : e["shape"]) {
            // Sizes bounded by the file, so the product below never overflows.
            if (!d.is_number_unsigned() || d.get<uint64_t>() > file_bytes)
                r.fail(where + " ('" + t.name + "') has a bad shape " + e["shape"].dump());
            const auto size = static_cast<int64_t>(d.get<uint64_t>());
            t.shape.push_back(size);
            t.numel = size == 0 || t.numel <= static_cast<int64_t>(file_bytes) / size
                          ? t.numel * size
                          : static_cast<int64_t>(file_bytes) + 1;
        }
        if (t.numel * 4 > static_cast<int64_t>(file_bytes))
            r.fail(where + " ('" + t.name + "') is larger than the file");
        list.push_back(std::move(t));
    }
    return list;
}

uint64_t file_bytes_for(const std::vector<TensorEntry>& list, uint64_t header_len) {
    // Saturating: an unverified header's sizes (described_file_bytes) are bounded only loosely.
    constexpr uint64_t kMax = UINT64_MAX / 2;
    uint64_t data_bytes = 0;
    for (const auto& t : list) data_bytes = std::min(kMax, data_bytes + std::min(kMax, static_cast<uint64_t>(t.numel) * 4));
    return std::min(kMax, kPrefixBytes + header_len + data_bytes + kFooterBytes);
}

// The file size an (unverified) header describes, or 0 when it describes none.
uint64_t described_file_bytes(const json& header, const std::string& path, uint64_t header_len, uint64_t file_bytes) {
    try {
        // Bounded by far more than the file: a truncated file's tensors are larger than what is left of it, and the
        // size they describe is what tells a truncation from a damaged header. (1 TiB a dimension keeps every
        // product below 2^62.)
        constexpr uint64_t kDimensionBound = uint64_t{1} << 40;
        return file_bytes_for(read_tensor_list(HeaderReader(header, path), std::max(file_bytes, kDimensionBound)),
                              header_len);
    } catch (const CheckpointUnreadable&) {
        return 0;
    }
}

// The tensors the run expects against the checkpoint's list: an exact match of names, shapes and count.
void require_same_tensors(const std::string& path, const std::vector<TensorEntry>& have, size_t from,
                          const std::vector<std::pair<std::string, Tensor*>>& want, const std::string& what) {
    for (size_t i = 0; i < std::max(have.size() - from, want.size()); ++i) {
        const TensorEntry* h = from + i < have.size() ? &have[from + i] : nullptr;
        const auto* w = i < want.size() ? &want[i] : nullptr;
        if (h && w && h->name == w->first && h->shape == w->second->shape()) continue;
        const std::string hs = h ? "'" + h->name + "' " + shape_string(h->shape) : "nothing";
        const std::string ws = w ? "'" + w->first + "' " + shape_string(w->second->shape()) : "nothing";
        // The optimizer's name matched before this is called: a different state is a changed setting (SGD's momentum
        // buffers come and go with optimizer.momentum).
        const std::string why = what == "optimizer"
                                    ? "the optimizer's settings differ from the run that wrote it (optimizer.momentum "
                                      "0 keeps no momentum buffers, above 0 one per parameter): resume with the "
                                      "settings that wrote it, or start a fresh run in another output.dir"
                                    : "it was written for another " + what + ", use a checkpoint of this one";
        throw InputError(path + ": " + what + " tensor " + std::to_string(i) + " is " + hs + " in the checkpoint but " +
                         ws + " in this run; " + why);
    }
}

}  // namespace

namespace {

std::string rank_copy_name(int64_t rank, const std::string& name) { return "rank" + std::to_string(rank) + "/" + name; }

// The copies fit the run's tensors: one value list per tensor from copies.first on, each with every rank's values (a
// caller's bug if not).
void check_rank_copies(const std::vector<std::pair<std::string, Tensor*>>& tensors, const RankCopies& copies) {
    if (copies.empty()) return;
    if (copies.ranks < 1 || copies.values.empty() || copies.first > tensors.size() ||
        copies.values.size() > tensors.size() - copies.first)
        throw Error("save_checkpoint: per-rank copies of " + std::to_string(copies.values.size()) + " tensors from " +
                    std::to_string(copies.first) + " for " + std::to_string(tensors.size()));
    for (size_t i = 0; i < copies.values.size(); ++i) {
        const auto& [name, t] = tensors[copies.first + i];
        if (copies.values[i].size() != static_cast<size_t>(t->numel() * copies.ranks))
            throw Error("save_checkpoint: the per-rank copies of '" + name + "' hold " +
                        std::to_string(copies.values[i].size()) + " values, not " + std::to_string(copies.ranks) +
                        " x " + std::to_string(t->numel()));
    }
}

}  // namespace

void save_checkpoint(const std::string& path, const std::vector<nn::Parameter*>& params, optim::Optimizer* opt,
                     const LoopState& s, const RankCopies& copies, std::vector<Tensor>* optimizer_state) {
    auto tensors = all_tensors(params, opt);
    if (optimizer_state != nullptr) {
        const size_t state = tensors.size() - params.size();
        if (optimizer_state->size() != state)
            throw Error("save_checkpoint: " + std::to_string(optimizer_state->size()) + " tensors in place of the " +
                        "optimizer's " + std::to_string(state));
        for (size_t i = 0; i < state; ++i) {
            Tensor& t = (*optimizer_state)[i];
            if (t.shape() != tensors[params.size() + i].second->shape())
                throw Error("save_checkpoint: the tensor in place of '" + tensors[params.size() + i].first +
                            "' has another shape");
            tensors[params.size() + i].second = &t;
        }
    }
    check_rank_copies(tensors, copies);
    // Host copies of device tensors: each is checksummed for the header, then written after it.
    std::vector<Tensor> staged;
    staged.reserve(tensors.size());
    struct Block {
        const float* data;
        int64_t numel;
    };
    std::vector<Block> blocks;  // what follows the header, in header order
    json list = json::array();
    auto add = [&](const std::string& name, const Shape& shape, const float* data, int64_t numel) {
        list.push_back({{"name", name}, {"shape", shape}, {"crc32c", crc32c(bytes_of(data, numel))}});
        blocks.push_back({data, numel});
    };
    for (const auto& [name, t] : tensors) {
        const float* host = t->data();
        if (t->device() != Device::CPU) {
            staged.emplace_back(t->shape());
            staged.back().copy_from(*t);
            host = staged.back().data();
        }
        add(name, t->shape(), host, t->numel());
    }
    for (int64_t r = 0; r < copies.ranks; ++r)
        for (size_t i = 0; i < copies.values.size(); ++i) {
            const auto& [name, t] = tensors[copies.first + i];
            add(rank_copy_name(r, name), t->shape(), copies.values[i].data() + r * t->numel(), t->numel());
        }
    json header;
    header["format"] = "ringtrain-checkpoint";
    header["version"] = kVersion;
    header["epoch"] = s.epoch;
    header["step_in_epoch"] = s.step_in_epoch;
    header["global_step"] = s.global_step;
    header["steps_per_epoch"] = s.steps_per_epoch;
    header["world_size"] = s.world_size;
    header["epoch_loss_sum"] = s.epoch_loss_sum;
    header["epoch_samples"] = s.epoch_samples;
    header["rng_states"] = s.rng_states;
    header["extra"] = s.extra;
    header["optimizer"] = opt ? json{{"name", opt->name()}, {"steps", opt->steps_taken()}} : json(nullptr);
    header["model_hash"] = sync::parameter_layout_hash(params);
    header["parameter_tensors"] = params.size();
    header["rank_copies"] = copies.ranks;
    if (!copies.empty()) {  // which tensors the copies are of (absent in older files: all of them)
        header["rank_copies_first"] = copies.first;
        header["rank_copies_tensors"] = copies.values.size();
    }
    header["tensors"] = list;
    const std::string text = header.dump();
    const uint64_t len = text.size();
    const uint32_t footer = prefix_crc(kMagic, len, text);

    write_atomically(path, [&](std::ofstream& out) {
        out.write(kMagic, sizeof kMagic);
        out.write(reinterpret_cast<const char*>(&len), sizeof len);
        out.write(text.data(), static_cast<std::streamsize>(text.size()));
        for (const Block& b : blocks)
            out.write(reinterpret_cast<const char*>(b.data), static_cast<std::streamsize>(b.numel * 4));
        out.write(reinterpret_cast<const char*>(&footer), sizeof footer);
    });
}

namespace {

// The loop position and RNG states of a verified header, checked for consistency.
LoopState read_position(const HeaderReader& r, const json& header) {
    LoopState s;
    s.epoch = r.integer("epoch", 0);
    s.step_in_epoch = r.integer("step_in_epoch", 0);
    s.global_step = r.integer("global_step", 0);
    s.steps_per_epoch = r.integer("steps_per_epoch", 1);
    s.world_size = r.integer("world_size", 1);
    s.epoch_loss_sum = r.number("epoch_loss_sum");
    s.epoch_samples = r.number("epoch_samples");
    if (s.step_in_epoch > s.steps_per_epoch)
        r.fail("step_in_epoch " + std::to_string(s.step_in_epoch) + " is past the epoch's " +
               std::to_string(s.steps_per_epoch) + " steps");
    if (s.epoch > INT64_MAX / s.steps_per_epoch - 1 ||
        s.global_step != s.epoch * s.steps_per_epoch + s.step_in_epoch)
        r.fail("global_step " + std::to_string(s.global_step) + " disagrees with epoch " + std::to_string(s.epoch) +
               " x " + std::to_string(s.steps_per_epoch) + " steps + step_in_epoch " + std::to_string(s.step_in_epoch));
    if (s.epoch_samples < 0) r.fail("key 'epoch_samples' is negative");
    const json& rngs = r.at("rng_states", &json::is_array, "an array");
    if (static_cast<int64_t>(rngs.size()) != s.world_size) r.fail("has " + std::to_string(rngs.size()) + " rng_states for world_size " + std::to_string(s.world_size));
    for (const json& st : rngs) {
        if (!st.is_array() || st.size() != 4 || !std::all_of(st.begin(), st.end(), [](const json& w) { return w.is_number_unsigned(); }))
            r.fail("key 'rng_states' holds something other than four unsigned words per rank");
        s.rng_states.push_back(st.get<Rng::State>());
    }
    const auto extra = header.find("extra");
    s.extra = extra != header.end() && extra->is_object() ? *extra : json::object();
    return s;
}

// Reads every tensor of `list` from `offset` on, checking each one's CRC-32C and finiteness, and hands each to
// `take` (its index in `list`, a host tensor).
void read_verified_tensors(std::ifstream& in, const std::string& path, const std::vector<TensorEntry>& list,
                           uint64_t offset, const std::function<void(size_t, Tensor&&)>& take) {
    in.seekg(static_cast<std::streamoff>(offset));
    for (size_t i = 0; i < list.size(); ++i) {
        const TensorEntry& t = list[i];
        Tensor host(t.shape);
        in.read(reinterpret_cast<char*>(host.data()), static_cast<std::streamsize>(t.numel * 4));
        if (!in) throw CheckpointUnreadable(path + ": checkpoint is truncated (while reading '" + t.name + "')");
        if (crc32c(bytes_of(host.data(), t.numel)) != t.crc)
            throw CheckpointUnreadable(path + ": tensor '" + t.name + "' fails its checksum; the file is damaged");
        const auto bad = std::find_if(host.data(), host.data() + t.numel, [](float v) { return !std::isfinite(v); });
        if (bad != host.data() + t.numel)
            throw InputError(path + ": tensor '" + t.name + "' holds " + std::to_string(*bad) + " at element " +
                             std::to_string(bad - host.data()) + "; the run that wrote it had diverged");
        take(i, std::move(host));
    }
}

// The per-rank copies a verified header announces ("rank_copies", absent in files written before them): 0, or one
// set per rank of world_size, each a copy of the own entries first .. first + count - 1 ("rank_copies_first" and
// "rank_copies_tensors", absent in files written before them: all of them), named "rank<R>/<name>" with the same
// shapes. Returns the layout; `own` is set to the count of the run's own tensors.
struct CopiesLayout {
    int64_t ranks = 0;
    size_t first = 0, count = 0;
};

CopiesLayout read_rank_copies_layout(const HeaderReader& r, const json& header, const std::vector<TensorEntry>& list,
                                     int64_t world_size, size_t& own) {
    CopiesLayout c;
    c.ranks = header.contains("rank_copies") ? r.integer("rank_copies", 0) : 0;
    if (c.ranks != 0 && c.ranks != world_size)
        r.fail("key 'rank_copies' is " + std::to_string(c.ranks) + ", not 0 or world_size " + std::to_string(world_size));
    const auto sets = static_cast<size_t>(c.ranks);
    if (c.ranks > 0 && header.contains("rank_copies_tensors")) {
        c.first = static_cast<size_t>(r.integer("rank_copies_first", 0));
        c.count = static_cast<size_t>(r.integer("rank_copies_tensors", 1));
        if (c.count > list.size() / (sets + 1) || c.first > list.size() - c.count * (sets + 1))
            r.fail("lists " + std::to_string(list.size()) + " tensors, too few for " + std::to_string(c.ranks) +
                   " per-rank copies of tensors " + std::to_string(c.first) + " to " +
                   std::to_string(c.first + c.count - 1));
        own = list.size() - c.count * sets;
    } else {
        if (list.size() % (sets + 1) != 0)
            r.fail("lists " + std::to_string(list.size()) + " tensors, not the run's own and " +
                   std::to_string(c.ranks) + " per-rank copies of them");
        own = list.size() / (sets + 1);
        c.count = c.ranks > 0 ? own : 0;
    }
    for (size_t rank = 0; rank < sets; ++rank)
        for (size_t i = 0; i < c.count; ++i) {
            const size_t at = own + rank * c.count + i;
            const TensorEntry& copy = list[at];
            const TensorEntry& of = list[c.first + i];
            if (copy.name != rank_copy_name(static_cast<int64_t>(rank), of.name) || copy.shape != of.shape)
                r.fail("tensor entry " + std::to_string(at) + " ('" + copy.name + "') is not rank " +
                       std::to_string(rank) + "'s copy of '" + of.name + "' " + shape_string(of.shape));
        }
    return c;
}

// The checkpoint's prefix and JSON header from `in` (at its start), verified against the footer's checksum before any
// of it is used: a damaged, truncated or extended file is named as such. `len` gets the header's length.
json read_verified_header(std::ifstream& in, const std::string& path, uint64_t file_bytes, uint64_t& len) {
    len = 0;
    char magic[8];
    in.read(magic, sizeof magic);
    in.read(reinterpret_cast<char*>(&len), sizeof len);
    if (in && std::memcmp(magic, kMagicV1, sizeof kMagicV1) == 0)
        throw InputError(path + ": written by an older ringtrain (checkpoint format 1, without checksums); resume "
                                "it with that version, or start a fresh run in another output.dir");
    if (!in || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
        throw CheckpointUnreadable(path + ": not a ringtrain checkpoint (bad magic); pass a ckpt-*.bin file written "
                                          "by ringtrain");
    if (len > kMaxHeaderBytes || kPrefixBytes + len + kFooterBytes > file_bytes)
        throw CheckpointUnreadable(path + ": checkpoint is truncated or its header length is damaged (" +
                                   std::to_string(file_bytes) + " bytes)");
    std::string text(len, '\0');
    in.read(text.data(), static_cast<std::streamsize>(len));
    auto footer_at = [&](uint64_t end) {
        uint32_t f = 0;
        in.seekg(static_cast<std::streamoff>(end - kFooterBytes));
        in.read(reinterpret_cast<char*>(&f), sizeof f);
        return in ? f : ~prefix_crc(magic, len, text);
    };
    if (!in) throw CheckpointUnreadable(path + ": cannot read the checkpoint");
    const json header = json::parse(text, nullptr, false);
    if (footer_at(file_bytes) != prefix_crc(magic, len, text)) {
        in.clear();
        // The footer is not at the end: appended or missing bytes if the (unverified) header says where it is and
        // the footer found there matches, else a damaged header.
        const uint64_t expect = header.is_object() ? described_file_bytes(header, path, len, file_bytes) : 0;
        if (expect > file_bytes)
            throw CheckpointUnreadable(path + ": checkpoint is truncated (" + std::to_string(file_bytes) +
                                       " bytes, its header describes " + std::to_string(expect) + ")");
        if (expect > 0 && footer_at(expect) == prefix_crc(magic, len, text))
            throw CheckpointUnreadable(path + ": checkpoint has " + std::to_string(file_bytes - expect) +
                                       " bytes of trailing data after its end; the file is damaged");
        throw CheckpointUnreadable(path + ": the checkpoint header fails its checksum; the file is damaged");
    }
    if (header.is_discarded())
        throw CheckpointUnreadable(path + ": checkpoint header is not valid JSON; the file is damaged");
    if (!header.is_object()) throw CheckpointUnreadable(path + ": checkpoint header is not a JSON object");
    return header;
}

// A folder, a missing file or the folder's `latest` pointer, each with what to pass instead. Before anything is read.
void check_checkpoint_path(const std::string& path) {
    std::error_code ec;
    if (fs::is_directory(path, ec))
        throw CheckpointUnreadable(path + ": a folder, not a checkpoint; name a ckpt-*.bin file inside it, or use "
                                   "checkpoint.resume=auto for the newest in output.dir");
    if (!fs::is_regular_file(path, ec))
        throw CheckpointUnreadable(path + ": checkpoint not found (or not a regular file); name a ckpt-*.bin file, or "
                                   "use checkpoint.resume=auto for the newest in output.dir");
    if (fs::path(path).filename() == "latest") {
        // The folder's pointer to its newest checkpoint (one line, its file name), not a checkpoint.
        std::ifstream pointer(path);
        std::string named;
        std::getline(pointer, named);
        throw CheckpointUnreadable(path + ": the name of the newest checkpoint, not one; pass " +
                                   (named.empty() ? std::string("a ckpt-*.bin file of that folder")
                                                  : (fs::path(path).parent_path() / named).string()) +
                                   ", or use checkpoint.resume=auto to resume from it");
    }
}

}  // namespace

LoopState load_checkpoint(const std::string& path, const std::vector<nn::Parameter*>& params, optim::Optimizer* opt,
                          RankCopies* copies) {
    check_checkpoint_path(path);
    std::error_code ec;
    const uint64_t file_bytes = fs::file_size(path, ec);
    std::ifstream in(path, std::ios::binary);
    if (!in || ec) throw CheckpointUnreadable(path + ": cannot read the checkpoint");

    // 1. The prefix and the header, verified against the footer before any of it is used.
    uint64_t len = 0;
    const json header = read_verified_header(in, path, file_bytes, len);
    const HeaderReader r(header, path);
    if (r.integer("version", 0) != kVersion)
        throw InputError(path + ": checkpoint format " + header["version"].dump() + ", this ringtrain reads format " +
                         std::to_string(kVersion) + "; use the ringtrain that wrote it");

    LoopState s = read_position(r, header);
    const json& opt_rec = header.contains("optimizer") ? header["optimizer"] : json();
    if (!opt_rec.is_null() && !(opt_rec.is_object() && opt_rec.contains("name") && opt_rec["name"].is_string() &&
                                opt_rec.contains("steps") && opt_rec["steps"].is_number_unsigned()))
        r.fail("key 'optimizer' is not null or {\"name\": string, \"steps\": count}");

    // 3. The tensor list against the file's size and this run's model and optimizer.
    const std::vector<TensorEntry> list = read_tensor_list(r, file_bytes);
    size_t own = 0;  // the run's own tensors (the model's, the optimizer's); per-rank copies of them follow
    const CopiesLayout layout = read_rank_copies_layout(r, header, list, s.world_size, own);
    const auto param_count = static_cast<size_t>(r.integer("parameter_tensors", 0));
    if (param_count > own) r.fail("parameter_tensors exceeds the tensor list");
    const uint64_t expect = file_bytes_for(list, len);
    if (file_bytes < expect)
        throw CheckpointUnreadable(path + ": checkpoint is truncated (" + std::to_string(file_bytes) +
                                   " bytes, its header describes " + std::to_string(expect) + ")");
    if (file_bytes > expect)
        throw CheckpointUnreadable(path + ": checkpoint has " + std::to_string(file_bytes - expect) +
                                   " bytes of trailing data after its end; the file is damaged");
    const auto want = all_tensors(params, opt);
    const std::vector<std::pair<std::string, Tensor*>> want_params(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(params.size()));
    require_same_tensors(path, std::vector<TensorEntry>(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(param_count)), 0, want_params, "model");
    const json& stored_hash = r.at("model_hash", &json::is_number_unsigned, "an unsigned integer");
    if (stored_hash.get<uint64_t>() != sync::parameter_layout_hash(params))
        r.fail("model_hash does not match its own tensor list");
    if (opt) {
        if (opt_rec.is_null() || opt_rec["name"] != opt->name())
            throw InputError(path + ": checkpoint was written with optimizer " +
                             (opt_rec.is_null() ? std::string("none") : opt_rec["name"].dump()) +
                             " but the config uses " + opt->name() + "; use the same optimizer to resume");
        const std::vector<std::pair<std::string, Tensor*>> want_state(want.begin() + static_cast<std::ptrdiff_t>(params.size()), want.end());
        const std::vector<TensorEntry> have_state(list.begin() + static_cast<std::ptrdiff_t>(param_count),
                                                  list.begin() + static_cast<std::ptrdiff_t>(own));
        require_same_tensors(path, have_state, 0, want_state, "optimizer");
    }

    // 4. Every tensor read and verified before any is restored, so a damaged file changes nothing.
    std::vector<Tensor> loaded;
    RankCopies got;
    if (copies) {
        got.ranks = layout.ranks;
        got.first = layout.first;
        got.values.resize(layout.count);
        for (size_t i = 0; i < got.values.size(); ++i)
            got.values[i].reserve(static_cast<size_t>(list[layout.first + i].numel * layout.ranks));
    }
    read_verified_tensors(in, path, list, kPrefixBytes + len, [&](size_t i, Tensor&& t) {
        if (i < want.size()) {
            loaded.push_back(std::move(t));
        } else if (copies && i >= own) {
            // Rank by rank in the file, so each rank's values follow the previous rank's.
            std::vector<float>& v = got.values[(i - own) % layout.count];
            v.insert(v.end(), t.data(), t.data() + t.numel());
        }
    });
    for (size_t i = 0; i < loaded.size(); ++i) want[i].second->copy_from(loaded[i]);
    if (opt) opt->set_steps_taken(opt_rec["steps"].get<int64_t>());
    if (copies) *copies = std::move(got);
    return s;
}

namespace {
constexpr const char* kLastAverageStep = "local_sgd_last_average_step";
}  // namespace

void record_last_average_step(LoopState& state, int64_t step) {
    if (!state.extra.is_object()) state.extra = json::object();
    state.extra[kLastAverageStep] = step;
}

int64_t recorded_last_average_step(const std::string& path, const LoopState& state) {
    const auto it = state.extra.find(kLastAverageStep);
    if (it == state.extra.end() || !it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() > state.global_step)
        throw CheckpointUnreadable(path + ": checkpoint has per-rank copies but no valid extra." + kLastAverageStep +
                                   "; the file is damaged or was not written by ringtrain");
    return it->get<int64_t>();
}

void record_log_window(LoopState& state, const LogWindow& w) {
    if (state.step_in_epoch == 0 || w.steps == 0) return;
    if (!state.extra.is_object()) state.extra = json::object();
    state.extra["log_window"] = {{"steps", w.steps}, {"loss_sum", w.loss_sum}, {"samples", w.samples}};
}

LogWindow recorded_log_window(const LoopState& state) {
    const auto it = state.extra.is_object() ? state.extra.find("log_window") : state.extra.end();
    if (it == state.extra.end() || !it->is_object()) return {};
    const json& w = *it;
    const auto number = [&](const char* key) { return w.contains(key) && w[key].is_number(); };
    if (!number("steps") || !w["steps"].is_number_integer() || !number("loss_sum") || !number("samples")) return {};
    return {w["steps"].get<int64_t>(), w["loss_sum"].get<double>(), w["samples"].get<double>()};
}

void check_checkpoint_classes(const std::string& path, const json& extra, const std::vector<std::string>& classes) {
    const auto it = extra.find("classes");
    if (it == extra.end()) return;
    const json ours = classes;
    if (*it != ours)
        throw InputError(path + ": written by a run on the classes " + it->dump() + ", this run's data has " +
                         (classes.empty() ? std::string("no class names") : ours.dump()) +
                         "; the model's outputs mean those classes: use the same class folders, or start a fresh run "
                         "in another output.dir");
}

std::string checkpoint_file_name(int64_t global_step) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "ckpt-%09lld.bin", static_cast<long long>(global_step));
    return buf;
}

int64_t checkpoint_step(const std::string& name) {
    constexpr std::string_view prefix = "ckpt-", suffix = ".bin";
    if (name.size() <= prefix.size() + suffix.size() || name.size() > prefix.size() + suffix.size() + 18 ||
        name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        return -1;
    const char* first = name.data() + prefix.size();
    const char* last = name.data() + name.size() - suffix.size();
    if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return -1;
    int64_t step = -1;
    std::from_chars(first, last, step);
    return step;
}

namespace {
// Checkpoint files in `dir`, highest global step first.
std::vector<std::pair<int64_t, std::string>> checkpoints_by_step(const std::string& dir) {
    std::vector<std::pair<int64_t, std::string>> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        const int64_t step = checkpoint_step(n);
        if (step >= 0 && e.is_regular_file(ec)) files.emplace_back(step, n);
    }
    std::sort(files.rbegin(), files.rend());
    return files;
}
}  // namespace

void publish_checkpoint(const std::string& dir, const std::string& file_name, int64_t keep) {
    write_atomically(dir + "/latest", [&](std::ofstream& out) { out << file_name << '\n'; });
    // By global step, not by name: names sort by step only while the step fits the zero padding.
    const auto files = checkpoints_by_step(dir);
    int64_t kept = 0;
    for (const auto& [step, name] : files) {
        if (name == file_name || kept < keep) {
            ++kept;
            continue;
        }
        std::error_code ec;
        fs::remove(fs::path(dir) / name, ec);
    }
}

ResumeCandidates resume_candidates(const std::string& dir) {
    ResumeCandidates c;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return c;
    const auto files = checkpoints_by_step(dir);
    std::string named;
    if (fs::exists(dir + "/latest", ec)) {
        std::ifstream in(dir + "/latest");
        std::getline(in, named);
        if (named.empty())
            c.latest_problem = dir + "/latest is empty";
        else if (checkpoint_step(named) < 0)  // also refuses any path: a checkpoint name has no '/'
            c.latest_problem = dir + "/latest names '" + named + "', which is not a checkpoint file of this folder";
        else if (!fs::is_regular_file(dir + "/" + named, ec))
            c.latest_problem = dir + "/latest names " + named + ", which does not exist";
        else
            c.paths.push_back(dir + "/" + named);
    } else if (!files.empty()) {
        c.latest_problem = dir + "/latest is missing";
    }
    for (const auto& f : files)
        if (f.second != named) c.paths.push_back(dir + "/" + f.second);
    return c;
}

namespace {

// resume_candidates(dir) tried best first with `load` until one loads: its path ("" when none does, or there is no
// candidate), and what was passed over and why (`latest`'s problem first). The one rule of resume=auto and of eval
// given a folder, which differ only in their words.
struct NewestLoaded {
    std::string path;
    std::vector<std::string> passed_over;
    bool any_candidate = false;
};
NewestLoaded load_newest(const std::string& dir, const std::function<void(const std::string&)>& load) {
    const ResumeCandidates c = resume_candidates(dir);
    NewestLoaded r;
    r.any_candidate = !c.paths.empty();
    if (!c.latest_problem.empty()) r.passed_over.push_back(c.latest_problem);
    for (const std::string& path : c.paths) {
        try {
            load(path);
            r.path = path;
            return r;
        } catch (const CheckpointUnreadable& e) {
            r.passed_over.emplace_back(e.what());
        }
    }
    return r;
}

// "ringtrain: warning: <doing> <path>, the newest checkpoint that verifies: <what was passed over>", when anything was.
void warn_passed_over(const char* doing, const NewestLoaded& r) {
    if (r.passed_over.empty()) return;
    std::string note = std::string("ringtrain: warning: ") + doing + " " + r.path + ", the newest checkpoint that verifies: ";
    for (size_t i = 0; i < r.passed_over.size(); ++i) note += (i ? "; " : "") + r.passed_over[i];
    std::fprintf(stderr, "%s\n", note.c_str());
}

}  // namespace

std::string resume_newest(const std::string& dir, const std::function<void(const std::string&)>& load) {
    const NewestLoaded r = load_newest(dir, load);
    if (r.path.empty() && !r.passed_over.empty())
        throw InputError(dir + ": checkpoint.resume=auto found checkpoints but can use none (" + r.passed_over.back() +
                         "); restore a good checkpoint there, or start a fresh run in another output.dir");
    warn_passed_over("resuming from", r);
    return r.path;
}

std::string load_checkpoint_to_evaluate(const std::string& given, const std::function<void(const std::string&)>& load) {
    std::error_code ec;
    const fs::path g(given);
    std::string dir;  // the folder to take the newest checkpoint of; "" for a file
    if (fs::is_directory(g, ec))
        dir = fs::is_directory(g / "checkpoints", ec) ? (g / "checkpoints").string() : given;
    else if (g.filename() == "latest" && fs::is_regular_file(g, ec))
        dir = g.has_parent_path() ? g.parent_path().string() : ".";
    else if (!fs::exists(g, ec))
        throw InputError("--checkpoint " + given + ": not found; pass a ckpt-*.bin file, a checkpoints folder or a "
                         "run's output.dir (its newest checkpoint is evaluated)");
    if (dir.empty()) {
        load(given);  // a file: load_checkpoint says what is wrong with it, if anything
        return given;
    }
    const NewestLoaded r = load_newest(dir, load);
    if (r.path.empty())
        throw InputError("--checkpoint " + given + ": " +
                         (r.any_candidate ? "no checkpoint in " + dir + " verifies"
                                          : "no checkpoint (ckpt-*.bin) in " + dir) +
                         (r.passed_over.empty() ? std::string() : " (" + r.passed_over.back() + ")") +
                         "; pass a good checkpoint file, or the output.dir of a run that wrote one");
    warn_passed_over("evaluating", r);
    return r.path;
}

bool holds_checkpoints(const std::string& dir) {
    std::error_code ec;
    return fs::exists(dir + "/latest", ec) || (fs::is_directory(dir, ec) && !checkpoints_by_step(dir).empty());
}

bool holds_previous_run(const std::string& output_dir, const std::string& checkpoint_dir) {
    std::error_code ec;
    const fs::path metrics = fs::path(output_dir) / "metrics.jsonl";
    const bool empty_file = fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) == 0;
    const bool has_metrics = fs::exists(metrics, ec) && !empty_file;
    // A summary.json alone (its metrics.jsonl removed, or another tool's file) would be overwritten too.
    const bool has_summary = fs::exists(fs::path(output_dir) / "summary.json", ec);
    return has_metrics || has_summary || holds_checkpoints(checkpoint_dir);
}

void check_latest_pointer(const std::string& dir) {
    std::error_code ec;
    const fs::path latest = fs::path(dir) / "latest";
    if (fs::exists(fs::symlink_status(latest, ec)) && !fs::is_regular_file(latest, ec))
        throw InputError(latest.string() + ": not a file (it names the newest checkpoint and every checkpoint rewrites "
                         "it); remove it");
}

std::vector<std::string> set_aside_checkpoints_after(const std::string& dir, int64_t global_step,
                                                     const std::string& resumed_path) {
    std::vector<std::pair<int64_t, std::string>> later;
    for (const auto& f : checkpoints_by_step(dir))
        if (f.first > global_step) later.push_back(f);
    if (later.empty()) return {};
    std::error_code ec;
    // `latest` first: a stop part-way through the renames must not leave it naming one of them.
    const fs::path resumed = fs::absolute(fs::path(resumed_path));
    if (fs::equivalent(resumed.parent_path(), fs::path(dir), ec) && !ec)
        write_atomically(dir + "/latest", [&](std::ofstream& out) { out << resumed.filename().string() << '\n'; });
    else
        fs::remove(fs::path(dir) / "latest", ec);
    std::vector<std::string> moved;
    for (const auto& [step, name] : later) {
        const fs::path from = fs::path(dir) / name;
        // Never over an earlier roll-back's file of the same name: .abandoned, .abandoned-2, ...
        fs::path to = fs::path(from.string() + ".abandoned");
        for (int k = 2; fs::exists(fs::symlink_status(to, ec)); ++k)
            to = fs::path(from.string() + ".abandoned-" + std::to_string(k));
        fs::rename(from, to, ec);
        if (ec)
            throw Error(from.string() + ": cannot rename it out of the way (" + ec.message() +
                        "); it is a later checkpoint of the run this one resumed away from: move it elsewhere");
        moved.push_back(name);
    }
    return moved;
}

void remove_stale_temporaries(const std::string& dir) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        const bool ckpt_tmp = n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0 && checkpoint_step(n.substr(0, n.size() - 4)) >= 0;
        if (ckpt_tmp || n == "latest.tmp") fs::remove(e.path(), ec);
    }
}

}  // namespace ringtrain::train
