// Local SGD checkpoints with several ranks, in-process on every rank (mpirun -np 2 and -np 3). Between averages the
// ranks' parameters differ, and each rank keeps its own optimizer state; a checkpoint therefore holds the ranks'
// average as its model plus every rank's own tensors ("rank<R>/<name>"), and writing it changes nothing in the run.
// So a run with another checkpoint schedule, and a run stopped by train.max_steps (or killed right after a
// checkpoint) and resumed, end bit for bit where an uninterrupted run does, on the dense path (Trainer) and the
// sparse path (SparseTrainer). A checkpoint without the per-rank tensors (written before them) still resumes, with
// rank 0's state for every rank.
#include <mpi.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "checkpoint_surgery.hpp"
#include "fixtures.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/config.hpp"
#include "ringtrain/train/sparse_trainer.hpp"
#include "ringtrain/train/trainer.hpp"
#include "sparse_files.hpp"
#include "support/mpi_job.hpp"
#include "support/run_command.hpp"
#include "tiny_run.hpp"

using namespace rt_test;
using nlohmann::json;
using ringtrain::train::checkpoint_file_name;
using ringtrain::train::Config;
using ringtrain::train::SparseTrainer;
using ringtrain::train::Trainer;
namespace fs = std::filesystem;

namespace {

// Averages every 4 steps. The tests' stops and checkpoint steps (5, 7, 13, 37, ...) fall between averages.
constexpr const char* kLocalSgd = R"("sync": {"mode": "local_sgd", "local_sgd_period": 4})";

// What a step callback throws to end a run as a kill would: right after the step's checkpoint, nothing else saved.
struct Killed {};

using Tensors = std::map<std::string, std::vector<float>>;

// ---- the dense path ----

struct DenseCase {
    const char* name;
    const char* model;      // the model file's text
    const char* optimizer;  // the optimizer object's members
};

const DenseCase kDenseCases[] = {
    {"sgd-momentum", kTinyCnn, R"("name": "sgd", "lr": 0.05, "momentum": 0.9)"},
    {"adam", kTinyCnn, R"("name": "adam", "lr": 0.01)"},
    // BatchNorm's running statistics differ per rank too (local SGD refuses synchronised BatchNorm).
    {"batchnorm", kSyncBnModel, R"("name": "sgd", "lr": 0.05, "momentum": 0.9)"},
};

// A folder for one run (the model file inside it): a fresh run into a previous run's output.dir is refused.
std::string dense_dir(const DenseCase& c, const std::string& run) {
    return shared_job_dir(std::string("local-sgd-") + c.name + "-" + run,
                          [&](const std::string& dir) { write_file(dir + "/tiny.json", c.model); });
}

Config dense_config(const DenseCase& c, const std::string& dir, const std::vector<std::string>& overrides) {
    return tiny_run(dir, std::string(", ") + kLocalSgd + R"(, "optimizer": {)" + c.optimizer + "}", overrides);
}

// Trains in `dir` and returns this rank's final parameters.
std::vector<float> train_dense(ringtrain::comm::Communicator& comm, const DenseCase& c, const std::string& dir,
                               const std::vector<std::string>& overrides) {
    Trainer t(dense_config(c, dir, overrides), comm);
    t.train();
    return t.parameters_flat();
}

// The epoch lines' mean training losses of the run in `dir` (rank 0's metrics.jsonl).
std::vector<double> epoch_train_losses(const std::string& dir) {
    std::vector<double> v;
    for (const json& l : read_jsonl(dir + "/out/metrics.jsonl"))
        if (l["type"] == "epoch") v.push_back(l["train_loss"].get<double>());
    return v;
}

std::string checkpoint_path(const std::string& dir, int64_t step) {
    return dir + "/out/checkpoints/" + checkpoint_file_name(step);
}

// A checkpoint written between averages (rank 0 reads it): every rank's own copy of every tensor follows the run's
// tensors, and the copies differ (the ranks drifted apart). With `model_is_mean`, the model's tensors are the mean of
// the ranks' copies (not so for FTRL, whose averaged weights follow from the averaged state). With `state_is_mean` (the
// sparse path) the optimizer's state is the mean of the ranks' too, so that a run resumed with allreduce starts from
// one consistent average.
void check_between_averages_layout(const std::string& path, int world, bool model_is_mean, bool state_is_mean) {
    // CHECK, never REQUIRE: rank 0 alone runs this, and leaving the test early would leave the others waiting.
    const CheckpointBytes c = read_checkpoint_bytes(path);
    const Tensors t = checkpoint_tensor_values(path);
    CHECK(c.header["rank_copies"] == world);
    const size_t params = c.header["parameter_tensors"].get<size_t>();
    const size_t own = c.header["tensors"].size() / static_cast<size_t>(world + 1);
    CHECK(c.header["tensors"].size() == own * static_cast<size_t>(world + 1));
    if (own == 0 || c.header["tensors"].size() != own * static_cast<size_t>(world + 1)) return;
    std::vector<float> rank0_all, rank1_all;
    for (size_t i = 0; i < own; ++i) {
        const std::string name = c.header["tensors"][i]["name"];
        INFO("tensor " << name);
        std::vector<float> mean(t.at(name).size(), 0.0f);
        bool complete = true;
        for (int r = 0; r < world; ++r) {
            const auto copy = t.find("rank" + std::to_string(r) + "/" + name);
            complete = complete && copy != t.end() && copy->second.size() == mean.size();
            if (!complete) break;
            for (size_t j = 0; j < mean.size(); ++j) mean[j] += copy->second[j] / static_cast<float>(world);
        }
        CHECK(complete);
        if (!complete) return;
        rank0_all.insert(rank0_all.end(), t.at("rank0/" + name).begin(), t.at("rank0/" + name).end());
        rank1_all.insert(rank1_all.end(), t.at("rank1/" + name).begin(), t.at("rank1/" + name).end());
        if (model_is_mean && i < params) CHECK(relative_difference(t.at(name), mean) < 1e-6);
        if (state_is_mean && i >= params) CHECK(relative_difference(t.at(name), mean) < 1e-6);
    }
    CHECK(relative_difference(rank0_all, rank1_all) > 1e-6);
}

// ---- the sparse path ----

struct SparseCase {
    const char* name;
    const char* optimizer;
};

// AdaGrad's squared-gradient sums and FTRL's z and n are per-rank state; FTRL's weights follow from them.
const SparseCase kSparseCases[] = {
    {"adagrad", R"("name": "adagrad", "lr": 0.2)"},
    {"ftrl", R"("name": "ftrl", "lr": 0.2)"},
};

std::string sparse_dir(const SparseCase& c, const std::string& run) {
    return shared_job_dir(std::string("local-sgd-sparse-") + c.name + "-" + run, [](const std::string& dir) {
        write_svm(dir + "/train.svm", svm_rows(160, 50, 3));
        write_svm(dir + "/test.svm", svm_rows(40, 50, 4));
    });
}

// Batch 8 per rank, 3 epochs (10 steps an epoch at 2 ranks), a checkpoint at every epoch's end unless overridden.
Config sparse_config(const SparseCase& c, const std::string& dir, const std::vector<std::string>& overrides) {
    const json doc = {{"model", source_dir() + "/models/sparse_logreg.json"},
                      {"data",
                       {{"format", "libsvm"},
                        {"train_file", dir + "/train.svm"},
                        {"test_file", dir + "/test.svm"},
                        {"shuffle_buffer", 16}}},
                      {"optimizer", json::parse(std::string("{") + c.optimizer + "}")},
                      {"train", {{"seed", 5}, {"batch_size", 8}, {"epochs", 3}, {"log_every_steps", 5}}},
                      {"sync", json::parse(std::string("{") + kLocalSgd + "}")["sync"]},
                      {"output", {{"dir", dir + "/out"}, {"progress", "none"}}}};
    return Config::from_json(doc, "test", overrides);
}

std::vector<float> train_sparse(ringtrain::comm::Communicator& comm, const SparseCase& c, const std::string& dir,
                                const std::vector<std::string>& overrides) {
    SparseTrainer t(sparse_config(c, dir, overrides), comm);
    t.train();
    return t.parameters_flat();
}

}  // namespace

TEST_CASE("dense local SGD: another checkpoint schedule, a max_steps stop and a kill end bit for bit as one run",
          "[train][mpi][checkpoint][local_sgd]") {
    const int world = world_size();
    auto comm = ringtrain::comm::make_communicator("ring");
    const int64_t steps_per_epoch = 480 / (8 * world), steps = 2 * steps_per_epoch;
    for (const DenseCase& c : kDenseCases) {
        INFO("case " << c.name);
        const std::string whole_dir = dense_dir(c, "whole");
        const std::vector<float> whole = train_dense(*comm, c, whole_dir, {});

        // Checkpoints every 7 steps, none at epochs' ends: none of them may change the run.
        CHECK(train_dense(*comm, c, dense_dir(c, "every7"),
                          {"checkpoint.every_steps=7", "checkpoint.every_epochs=0"}) == whole);

        // Stopped at step 37 (checkpoints every 5 steps until then), then resumed to the end.
        const std::string parts_dir = dense_dir(c, "parts");
        train_dense(*comm, c, parts_dir, {"checkpoint.every_steps=5", "train.max_steps=37"});
        if (comm->rank() == 0 && world > 1)
            check_between_averages_layout(checkpoint_path(parts_dir, 37), world, true, false);
        comm->barrier();
        CHECK(train_dense(*comm, c, parts_dir, {"checkpoint.every_steps=5", "checkpoint.resume=auto"}) == whole);
        // The last checkpoints agree too, every rank's copies (optimizer state included) with them, and the epochs'
        // mean training losses (each rank's partial sum travels in the checkpoint).
        if (comm->rank() == 0) {
            CHECK(checkpoint_tensor_values(checkpoint_path(parts_dir, steps)) ==
                  checkpoint_tensor_values(checkpoint_path(whole_dir, steps)));
            CHECK(epoch_train_losses(parts_dir) == epoch_train_losses(whole_dir));
        }

        // Killed right after a step checkpoint at the first epoch's last step (the loop has not yet averaged for the
        // epoch's evaluation): the resumed run must still average there.
        const std::string killed_dir = dense_dir(c, "killed");
        const std::vector<std::string> at_epoch_end = {"checkpoint.every_steps=" + std::to_string(steps_per_epoch),
                                                       "checkpoint.every_epochs=0"};
        {
            Trainer t(dense_config(c, killed_dir, at_epoch_end), *comm);
            t.set_step_callback([&](int64_t step) {
                if (step == steps_per_epoch) throw Killed{};
            });
            CHECK_THROWS_AS(t.train(), Killed);
        }
        std::vector<std::string> resume = at_epoch_end;
        resume.push_back("checkpoint.resume=auto");
        CHECK(train_dense(*comm, c, killed_dir, resume) == whole);
        comm->barrier();

        // One epoch, then resumed from its epoch checkpoint for the second (the most common resume of all). The
        // epoch's evaluation averaged the BatchNorm buffers; the resumed run, whose epoch line exists, does not
        // evaluate again, so the checkpoint must hold what that evaluation left. Buffers are not in
        // parameters_flat: the final checkpoints (every tensor, every rank's copies) are compared.
        const std::string epoch_dir = dense_dir(c, "epoch");
        train_dense(*comm, c, epoch_dir, {"train.epochs=1"});
        CHECK(train_dense(*comm, c, epoch_dir, {"checkpoint.resume=auto"}) == whole);
        if (comm->rank() == 0)
            CHECK(checkpoint_tensor_values(checkpoint_path(epoch_dir, steps)) ==
                  checkpoint_tensor_values(checkpoint_path(whole_dir, steps)));
        comm->barrier();
    }
}

TEST_CASE("dense local SGD: a checkpoint without per-rank tensors resumes with rank 0's state on every rank",
          "[train][mpi][checkpoint][local_sgd]") {
    auto comm = ringtrain::comm::make_communicator("ring");
    // Stopped at an averaging step (32), where the ranks' parameters agree.
    const DenseCase stateless{"plain-sgd", kTinyCnn, R"("name": "sgd", "lr": 0.05)"};
    const DenseCase momentum{"old-momentum", kTinyCnn, R"("name": "sgd", "lr": 0.05, "momentum": 0.9)"};
    for (const DenseCase* c : {&stateless, &momentum}) {
        INFO("case " << c->name);
        const std::vector<float> whole = train_dense(*comm, *c, dense_dir(*c, "whole"), {});
        const std::string dir = dense_dir(*c, "stripped");
        train_dense(*comm, *c, dir, {"train.max_steps=32"});
        if (comm->rank() == 0) strip_rank_copies(checkpoint_path(dir, 32));
        comm->barrier();
        Trainer t(dense_config(*c, dir, {"checkpoint.resume=auto"}), *comm);
        const json s = t.train();
        CHECK(s["resumed_from"].is_string());
        CHECK(s["parameters_identical"] == true);
        if (c == &stateless) {
            // Nothing per rank to lose: as before the per-rank tensors, bit for bit.
            CHECK(t.parameters_flat() == whole);
        } else if (world_size() > 1) {
            // Every rank continued with rank 0's momentum: not the uninterrupted run (why the copies exist).
            CHECK(t.parameters_flat() != whole);
        }
        comm->barrier();
    }
}

TEST_CASE("sparse local SGD: another checkpoint schedule and a max_steps stop end bit for bit as one run",
          "[train][sparse][mpi][checkpoint][local_sgd]") {
    auto comm = ringtrain::comm::make_communicator("ring");
    for (const SparseCase& c : kSparseCases) {
        INFO("case " << c.name);
        const std::vector<float> whole = train_sparse(*comm, c, sparse_dir(c, "whole"), {});
        CHECK(train_sparse(*comm, c, sparse_dir(c, "every3"),
                           {"checkpoint.every_steps=3", "checkpoint.every_epochs=0"}) == whole);
        const std::string parts_dir = sparse_dir(c, "parts");
        train_sparse(*comm, c, parts_dir, {"checkpoint.every_steps=3", "train.max_steps=13"});
        if (comm->rank() == 0 && world_size() > 1)
            check_between_averages_layout(checkpoint_path(parts_dir, 13), world_size(),
                                          c.name == std::string("adagrad"), true);
        comm->barrier();
        CHECK(train_sparse(*comm, c, parts_dir, {"checkpoint.every_steps=3", "checkpoint.resume=auto"}) == whole);

        // A checkpoint without per-rank tensors, at an averaging step (the sparse path averages the optimizer state
        // too, so the ranks agree there): it resumes, bit for bit.
        const std::string old_dir = sparse_dir(c, "stripped");
        train_sparse(*comm, c, old_dir, {"train.max_steps=12"});
        if (comm->rank() == 0) strip_rank_copies(checkpoint_path(old_dir, 12));
        comm->barrier();
        CHECK(train_sparse(*comm, c, old_dir, {"checkpoint.resume=auto"}) == whole);
        comm->barrier();
    }
}

TEST_CASE("sparse local SGD: an epoch's test figures are those of the averaged model its checkpoint holds",
          "[train][sparse][mpi][local_sgd]") {
    auto comm = ringtrain::comm::make_communicator("ring");
    const SparseCase& c = kSparseCases[0];
    const std::string dir = sparse_dir(c, "epoch-eval");
    // One epoch: 10 steps at 2 ranks, 6 at 3, neither a multiple of the period (4), so the ranks have drifted apart
    // when the epoch ends. Its evaluation must score one model (the ranks' average, the checkpoint's), not each rank's
    // share with its own.
    train_sparse(*comm, c, dir, {"train.epochs=1"});
    const std::string checkpoints = dir + "/out/checkpoints/";
    json line;
    if (comm->rank() == 0)
        for (const json& l : read_jsonl(dir + "/out/metrics.jsonl"))
            if (l["type"] == "epoch") line = l;
    SparseTrainer eval(sparse_config(c, dir, {"train.epochs=1"}), *comm);
    std::string name;  // the epoch's checkpoint, the run's only one
    std::getline(std::ifstream(checkpoints + "latest"), name);
    const json e = eval.evaluate_checkpoint(checkpoints + name);
    if (comm->rank() == 0) {
        CHECK(line.is_object());  // CHECK, never REQUIRE: the other ranks wait at the barrier below
        if (line.is_object()) {
        CHECK(line["test_logloss"].get<double>() == Approx(e["test_logloss"].get<double>()).epsilon(1e-9));
        CHECK(line["test_auc"].get<double>() == Approx(e["test_auc"].get<double>()).epsilon(1e-9));
        }
    }
    comm->barrier();
}
