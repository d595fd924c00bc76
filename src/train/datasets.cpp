#include "datasets.hpp"

#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/cifar10.hpp"
#include "ringtrain/data/idx.hpp"
#include "ringtrain/data/synthetic.hpp"
#include "ringtrain/ops/threads.hpp"

namespace ringtrain::train::detail {

Datasets make_datasets(const RunPlan& plan) {
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
            data::Normalization norm;
            norm.mean = static_cast<float>(p.mean.values.at(0));
            norm.stddev = static_cast<float>(p.stddev.values.at(0));
            d.train = data::load_cifar10_dataset(p.dir, data::Split::Train, norm);
            d.test = data::load_cifar10_dataset(p.dir, data::Split::Test, norm);
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
        case DataFormat::Libsvm:
        case DataFormat::Criteo:
            throw Error("internal: the sparse formats are read by the sparse path (SparseTrainer), not make_datasets");
    }
    return d;
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
