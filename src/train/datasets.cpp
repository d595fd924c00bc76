#include "datasets.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/json_file.hpp"
#include "ringtrain/data/cifar10.hpp"
#include "ringtrain/data/idx.hpp"
#include "ringtrain/data/image_folder.hpp"
#include "ringtrain/data/synthetic.hpp"
#include "ringtrain/ops/threads.hpp"

namespace ringtrain::train::detail {

namespace {

// data.augment: the training split's augmentation (image_folder and cifar10; the test split is never augmented).
data::ImageAugment augment(const DataPlan& p) {
    data::ImageAugment a;
    a.random_crop_padding = p.augment_crop_padding;
    a.hflip = p.augment_hflip;
    a.resized_crop_min_scale = static_cast<float>(p.augment_resized_crop.at(0));
    a.resized_crop_max_scale = static_cast<float>(p.augment_resized_crop.at(1));
    return a;
}

data::ImageFolderOptions image_folder_options(const DataPlan& p, bool training) {
    data::ImageFolderOptions o;
    data::ImageTransformOptions& t = o.transform;
    t.height = static_cast<int>(p.image_size.at(0));
    t.width = static_cast<int>(p.image_size.at(1));
    t.channels = p.channels;
    t.mean = p.mean.for_channels(p.channels);
    t.stddev = p.stddev.for_channels(p.channels);
    if (training) t.augment = augment(p);
    o.cache = p.cache;
    return o;
}

// The contiguous 1/world share of n files that rank `rank` checks.
int64_t share_begin(int64_t n, int rank, int world) { return n * rank / world; }

void find_bad_files(const data::Dataset& split, int rank, int world, int workers, std::vector<int64_t>& bad,
                    std::string& first_reason) {
    const auto& folder = dynamic_cast<const data::ImageFolderDataset&>(split);
    std::vector<std::string> reasons;
    const int64_t n = folder.size();
    bad = folder.find_bad_files(share_begin(n, rank, world), share_begin(n, rank + 1, world), workers, &reasons);
    if (first_reason.empty() && !reasons.empty()) first_reason = reasons.front();
}

// Every rank's indices, in rank order (each rank's share ascending, the shares in order: so ascending overall).
std::vector<int64_t> gather_indices(comm::Communicator& comm, const std::vector<int64_t>& mine) {
    const std::vector<uint64_t> counts = comm.allgather(static_cast<uint64_t>(mine.size()));
    const uint64_t most = *std::max_element(counts.begin(), counts.end());
    if (most == 0) return {};
    std::vector<int64_t> padded(mine);
    padded.resize(static_cast<size_t>(most), -1);  // allgather_bytes takes the same size from every rank
    const std::vector<std::byte> all = comm.allgather_bytes(std::as_bytes(std::span<const int64_t>(padded)));
    std::vector<int64_t> out;
    for (size_t r = 0; r < counts.size(); ++r)
        for (uint64_t i = 0; i < counts[r]; ++i) {
            int64_t v;
            std::memcpy(&v, all.data() + (r * most + i) * sizeof(int64_t), sizeof v);
            out.push_back(v);
        }
    return out;
}

}  // namespace

Datasets make_datasets(const RunPlan& plan, int rank, int world, bool check_training_files) {
    const DataPlan& p = plan.data;
    Datasets d;
    switch (p.format) {
        case DataFormat::Idx: {
            data::Normalization norm;
            norm.mean = static_cast<float>(p.mean.values.at(0));
            norm.stddev = static_cast<float>(p.stddev.values.at(0));
            d.train = data::load_idx_dataset(p.dir, data::Split::Train, norm);
            d.test = data::load_idx_dataset(p.dir, data::Split::Test, norm);
            break;
        }
        case DataFormat::Cifar10: {
            data::Cifar10Options test;
            test.mean = p.mean.for_channels(3);
            test.stddev = p.stddev.for_channels(3);
            data::Cifar10Options train = test;
            train.augment = augment(p);
            d.train = data::load_cifar10_dataset(p.dir, data::Split::Train, train);
            d.test = data::load_cifar10_dataset(p.dir, data::Split::Test, test);
            break;
        }
        case DataFormat::Synthetic: {
            data::SyntheticOptions o;
            o.sample_shape = p.synthetic_shape;
            o.num_classes = p.synthetic_classes;
            o.seed = plan.train.seed;
            o.size = p.synthetic_train_size;
            d.train = std::make_unique<data::SyntheticDataset>(o);
            o.first_index = o.size;  // held-out window of the same task
            o.size = p.synthetic_test_size;
            d.test = std::make_unique<data::SyntheticDataset>(o);
            break;
        }
        case DataFormat::ImageFolder: {
            data::ImageFolderListing train = data::scan_image_folder(p.train_dir, "data.train_dir");
            data::ImageFolderListing test =
                data::scan_image_folder(p.test_dir, "data.test_dir", train.classes, p.train_dir);
            d.train = std::make_unique<data::ImageFolderDataset>(std::move(train), image_folder_options(p, true));
            d.test = std::make_unique<data::ImageFolderDataset>(std::move(test), image_folder_options(p, false));
            // A header check would miss truncated and corrupt data; decoding each rank's share finds every bad file
            // at the cost of one decode per file spread over the ranks (and it fills the cache when that is on).
            // An evaluation reads only the training split's class names: its files are not decoded.
            if (p.skip_bad_files) {
                if (check_training_files)
                    find_bad_files(*d.train, rank, world, p.workers, d.bad_train, d.first_bad_reason);
                find_bad_files(*d.test, rank, world, p.workers, d.bad_test, d.first_bad_reason);
            }
            break;
        }
        case DataFormat::Libsvm:
        case DataFormat::Criteo:
            throw Error("internal: the sparse formats are read by the sparse path (SparseTrainer), not make_datasets");
    }
    return d;
}

void settle_bad_files(Datasets& data, const RunPlan& plan, comm::Communicator& comm) {
    if (plan.data.format != DataFormat::ImageFolder || !plan.data.skip_bad_files) return;
    auto& train = dynamic_cast<data::ImageFolderDataset&>(*data.train);
    auto& test = dynamic_cast<data::ImageFolderDataset&>(*data.test);
    const std::vector<int64_t> bad_train = gather_indices(comm, data.bad_train);
    const std::vector<int64_t> bad_test = gather_indices(comm, data.bad_test);
    const bool any = !bad_train.empty() || !bad_test.empty();
    data.skipped.clear();
    for (int64_t i : bad_train) data.skipped.push_back(train.file(i));
    for (int64_t i : bad_test) data.skipped.push_back(test.file(i));
    if (any && comm.rank() == 0) {
        std::string names;
        for (size_t i = 0; i < data.skipped.size() && i < 3; ++i) names += (i ? ", " : "") + data.skipped[i];
        if (data.skipped.size() > 3) names += ", ...";
        std::fprintf(stderr,
                     "ringtrain: data.skip_bad_files: every rank skips %zu of %lld training and %zu of %lld test "
                     "files that do not decode (%s)%s%s\n",
                     bad_train.size(), static_cast<long long>(train.size()), bad_test.size(),
                     static_cast<long long>(test.size()), names.c_str(),
                     data.first_bad_reason.empty() ? "" : "; the first on rank 0: ", data.first_bad_reason.c_str());
        std::fflush(stderr);
    }
    train.drop_files(bad_train);
    test.drop_files(bad_test);
    data.bad_train.clear();
    data.bad_test.clear();
    // A class whose every training file failed would train no output for it and still report a result: the same
    // exit 2 as an empty class folder. Every rank holds the same lists here, so every rank throws the same error.
    std::vector<int64_t> per_class(static_cast<size_t>(train.num_classes()), 0);
    for (int64_t i = 0; i < train.size(); ++i) ++per_class[static_cast<size_t>(train.label(i))];
    for (size_t c = 0; c < per_class.size(); ++c)
        if (per_class[c] == 0)
            throw CollectiveInputError(plan.data.train_dir + "/" + train.class_names()[c] +
                                       ": data.skip_bad_files skipped every training file of class '" +
                                       train.class_names()[c] + "' (none decodes); the class has nothing to train "
                                       "on: replace its files or remove the folder");
}

void check_image_input(const RunPlan& plan, const std::string& model_path) {
    if (plan.data.format != DataFormat::ImageFolder) return;
    const nlohmann::json model = read_json_file(model_path, "model file", "name a model file such as models/quality_cnn.json");
    if (!model.is_object() || !model.contains("input")) return;  // the model takes the data's shape
    const nlohmann::json& in = model["input"];
    const nlohmann::json ours = {plan.data.channels, plan.data.image_size.at(0), plan.data.image_size.at(1)};
    if (in != ours)
        throw InputError("data.image_size: [" + std::to_string(plan.data.image_size[0]) + ", " +
                         std::to_string(plan.data.image_size[1]) + "] with data.channels " +
                         std::to_string(plan.data.channels) + " gives samples of " + ours.dump() + " but " +
                         model_path + " takes input " + in.dump() + "; set data.image_size and data.channels to "
                         "the model's input");
}

data::LoaderOptions loader_options(const RunPlan& plan, data::LoaderMode mode, int rank, int world, Device device) {
    data::LoaderOptions lo;
    const bool train = mode == data::LoaderMode::Train;
    lo.batch_size = train ? plan.train.batch_size : plan.train.eval_batch_size;
    if (train) lo.seed = plan.train.seed;  // evaluation reads the set in order
    lo.rank = rank;
    lo.world = world;
    lo.mode = mode;
    lo.workers = plan.data.workers;
    // data.prefetch true asks for a prefetch thread where it can pay. On the CPU it only hides filling if it has a
    // core that the compute threads do not use: with as many compute threads as usable CPUs (mpirun --bind-to core,
    // srun --cpu-bind with one CPU per task, 1 thread per rank), it can only time-slice with them, adding hand-overs
    // and making each rank's step time jitter, which a synchronous job pays for at every step (measured:
    // bench/RESULTS.md). On a GPU the host thread mostly queues work, so the prefetch thread has the core to itself.
    lo.prefetch = plan.data.prefetch;
    const int cpus = ops::usable_cpus(), threads = plan.train.threads;
    if (lo.prefetch && device == Device::CPU && cpus <= threads) {
        lo.prefetch = false;
        lo.prefetch_off_reason = std::to_string(cpus) + " usable CPU" + (cpus == 1 ? "" : "s") + " for " +
                                 std::to_string(threads) + " compute thread" + (threads == 1 ? "" : "s") +
                                 ": a prefetch thread could only time-slice with them";
    }
    return lo;
}

}  // namespace ringtrain::train::detail
