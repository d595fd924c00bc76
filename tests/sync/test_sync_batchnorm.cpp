// Synchronised BatchNorm over a real communicator, under mpirun: N ranks x batch B with CommBatchStatsReducer give
// the same logits, summed gradients, parameters and running stats after several SGD steps as one model with plain
// BatchNorm on all N*B samples (which every rank also runs, locally, as the reference).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/sync/batch_stats_reducer.hpp"
#include "sync_test_util.hpp"

using namespace ringtrain;
using sync_test::world_rank;
using sync_test::world_size;

namespace {

// conv -> batchnorm2d -> relu -> flatten -> linear -> batchnorm1d -> relu -> linear on 2x5x5 samples: both
// batchnorm kinds, and the first batchnorm is not the first layer (its backward needs dx, so it sums). No bias before
// a batchnorm (as real models): its true gradient is zero, and comparing rounding noise says nothing.
const nlohmann::json kArch = {
    {"layers",
     {{{"type", "conv2d"}, {"out_channels", 3}, {"kernel", 3}, {"padding", 1}, {"bias", false}},
      {{"type", "batchnorm2d"}, {"momentum", 0.3}},
      {{"type", "relu"}},
      {{"type", "flatten"}},
      {{"type", "linear"}, {"out_features", 6}, {"bias", false}},
      {{"type", "batchnorm1d"}},
      {{"type", "relu"}},
      {{"type", "linear"}, {"out_features", 4}}}}};

// max |a - b| over the tensor, relative to the largest |b| (plus a small floor).
double max_rel_diff(const Tensor& a, const Tensor& b) {
    REQUIRE(a.numel() == b.numel());
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
        worst = std::max(worst, std::fabs(double(a.data()[i]) - double(b.data()[i])));
        scale = std::max(scale, std::fabs(double(b.data()[i])));
    }
    return worst / (scale + 1e-3);
}

}  // namespace

TEST_CASE("SyncBN: N ranks x B equal one model with plain BatchNorm on N*B", "[sync][syncbn]") {
    const int n = world_size(), rank = world_rank();
    const int64_t b = 3;  // per rank
    for (const std::string backend : {"ring", "mpi"}) {
        auto comm = comm::make_communicator(backend);
        sync::CommBatchStatsReducer reducer(*comm);
        Rng init(42), init_ref(42);
        nn::Model model(kArch, {2, 5, 5}, init);
        nn::Model reference(kArch, {2, 5, 5}, init_ref);
        REQUIRE(model.set_batch_stats_reducer(&reducer) == 2);
        Rng data(9);  // the same global batches on every rank
        const float lr = 0.1f;
        for (int step = 0; step < 4; ++step) {
            Tensor x({n * b, 2, 5, 5}), dlogits({n * b, 4});
            for (float& v : x.span()) v = data.uniform(-1.0f, 2.0f);
            for (float& v : dlogits.span()) v = data.uniform(-1.0f, 1.0f) / float(n * b);
            Rng ctx_rng(1);
            const nn::ForwardContext ctx{true, &ctx_rng};
            const Tensor mine = x.slice_rows(rank * b, (rank + 1) * b).clone();
            const Tensor& logits = model.forward(mine, ctx);
            const Tensor& ref_logits = reference.forward(x, ctx);
            CHECK(max_rel_diff(logits, ref_logits.slice_rows(rank * b, (rank + 1) * b)) < 1e-4);
            model.backward(dlogits.slice_rows(rank * b, (rank + 1) * b).clone());
            reference.backward(dlogits);
            // The gradient sync's job, done here by hand: the ranks' shares summed.
            for (size_t i = 0; i < model.parameters().size(); ++i) {
                nn::Parameter& p = *model.parameters()[i];
                comm->allreduce(p.grad.span(), comm::ReduceOp::Sum);
                INFO(backend << " step " << step << " gradient of " << p.name);
                CHECK(max_rel_diff(p.grad, reference.parameters()[i]->grad) < 1e-4);
            }
            for (nn::Model* m : {&model, &reference})
                for (nn::Parameter* p : m->parameters())
                    for (int64_t k = 0; k < p->value.numel(); ++k) p->value.data()[k] -= lr * p->grad.data()[k];
        }
        for (size_t i = 0; i < model.parameters().size(); ++i) {
            INFO(backend << " parameter " << model.parameters()[i]->name);
            CHECK(max_rel_diff(model.parameters()[i]->value, reference.parameters()[i]->value) < 1e-4);
        }
        for (size_t i = 0; i < model.buffers().size(); ++i) {
            INFO(backend << " buffer " << model.buffers()[i]->name);
            CHECK(max_rel_diff(model.buffers()[i]->value, reference.buffers()[i]->value) < 1e-5);
        }
        // Per step: two sums per batchnorm in forward, one per batchnorm in backward (none on one rank).
        CHECK(reducer.collectives() == (n > 1 ? 4u * 6u : 0u));
    }
}
