#include "datasets.hpp"

#include "ringtrain/data/idx.hpp"
#include "ringtrain/data/synthetic.hpp"

namespace ringtrain::train::detail {

Datasets make_datasets(const Config& c) {
    Datasets d;
    const std::string format = c.string("data.format");
    if (format == "idx") {
        data::Normalization norm;
        norm.mean = static_cast<float>(c.number("data.mean"));
        norm.stddev = static_cast<float>(c.number("data.std"));
        d.train = data::load_idx_dataset(c.string("data.dir"), data::Split::Train, norm);
        d.test = data::load_idx_dataset(c.string("data.dir"), data::Split::Test, norm);
    } else {
        data::SyntheticOptions o;
        o.sample_shape = c.integers("data.synthetic_shape");
        o.num_classes = c.integer("data.synthetic_classes");
        o.seed = static_cast<uint64_t>(c.integer("train.seed"));
        o.size = c.integer("data.synthetic_train_size");
        d.train = std::make_unique<data::SyntheticDataset>(o);
        o.first_index = o.size;  // held-out window of the same task
        o.size = c.integer("data.synthetic_test_size");
        d.test = std::make_unique<data::SyntheticDataset>(o);
    }
    return d;
}

}  // namespace ringtrain::train::detail
