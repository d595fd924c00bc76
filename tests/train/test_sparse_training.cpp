// The sparse path end to end through the binary (1 and 2 ranks): a Criteo-layout file from a known logistic model
// is learned to near the true model's log loss; N ranks x batch B equal 1 rank x batch N*B for sgd, adagrad and
// ftrl on both sync ways (also when one rank's rows touch no feature); resume equals an uninterrupted run; local
// SGD; eval of a checkpoint; the summary's and metrics' fields.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <thread>

#include "sparse_files.hpp"
#include "support/run_command.hpp"

using namespace rt_test;
using nlohmann::json;

namespace {

std::string sparse_config(const std::string& format, const std::string& train, const std::string& test,
                          const std::string& out, const std::string& extra) {
    return R"({"model": ")" + source_dir() + R"(/models/sparse_logreg.json",
  "data": {"format": ")" + format + R"(", "train_file": ")" + train + R"(", "test_file": ")" + test + R"("},
  "train": {"seed": 5, "log_every_steps": 1},
  "output": {"dir": ")" + out + R"(", "progress": "none"})" + extra + "}";
}

std::string ckpt(const std::string& out, int64_t step) {
    const std::string s = std::to_string(step);
    return out + "/checkpoints/ckpt-" + std::string(9 - s.size(), '0') + s + ".bin";
}

// `steps` blocks of `batch` rows per rank: rank 0's blocks then rank 1's (what 2 ranks read as contiguous shares),
// and the same blocks interleaved (what 1 rank reads as batches of 2 x batch).
void write_two_rank_files(const std::string& dir, int steps, int batch, bool second_rank_empty) {
    const auto r0 = svm_rows(steps * batch, 40, 11);
    const auto r1 = svm_rows(steps * batch, 40, 22, second_rank_empty);
    std::vector<SvmRow> split(r0), interleaved;
    split.insert(split.end(), r1.begin(), r1.end());
    for (int s = 0; s < steps; ++s)
        for (const auto* part : {&r0, &r1})
            interleaved.insert(interleaved.end(), part->begin() + s * batch, part->begin() + (s + 1) * batch);
    write_svm(dir + "/split.svm", split);
    write_svm(dir + "/interleaved.svm", interleaved);
}

void require_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
    REQUIRE(a.size() == b.size());
    REQUIRE_FALSE(a.empty());
    float worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (1.0f + std::abs(a[i])));
    INFO("largest relative difference " << worst);
    CHECK(worst <= tol);
}

}  // namespace

TEST_CASE("sparse: training on a Criteo-layout file recovers the known model", "[train][sparse]") {
    const std::string dir = temp_dir("sparse-criteo");
    write_criteo(dir + "/train.txt", 10000, 1);
    const double truth = write_criteo(dir + "/test.txt", 3000, 2);
    const std::string out = dir + "/out";
    write_file(dir + "/c.json", sparse_config("criteo", dir + "/train.txt", dir + "/test.txt", out, R"(,
        "optimizer": {"name": "adagrad", "lr": 0.1}, "checkpoint": {"every_epochs": 1})"));
    const auto r = run_command(binary() + " train --config " + dir + "/c.json --set data.hash_bits=18 "
                               "--set train.batch_size=50 --set train.epochs=4 --set data.shuffle_buffer=1000");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const json s = read_json(out + "/summary.json");
    INFO(s.dump(1));
    // The true model's own log loss on the test rows is the floor; 0.03 above it is a model that learned the
    // weights (predicting the base rate alone is about 0.1 worse on this data).
    CHECK(s["test_logloss"].get<double>() < truth + 0.03);
    CHECK(s["test_auc"].get<double>() > 0.7);
    CHECK(s["num_features"] == 1 << 18);
    for (const char* key : {"world_size", "batch_size_per_rank", "global_batch_size", "epochs", "steps",
                            "test_accuracy", "test_loss", "train_loss", "wall_s", "samples_per_s", "phase_s",
                            "bytes_sent", "bytes_received", "backend", "device", "test_auc", "test_logloss"})
        CHECK(s.contains(key));
    CHECK(s["steps"] == 4 * 10000 / 50);
    CHECK(s["steps_per_epoch"] == 10000 / 50);
    CHECK(s["sync"]["allgather_steps"] == 4 * 10000 / 50);  // one rank: nothing moves, counted as allgather
    CHECK_FALSE(s.contains("predicted"));  // one rank: nothing to predict
    CHECK(s["sync"]["sparse_update"] == "owner");
    const auto lines = read_jsonl(out + "/metrics.jsonl");
    int epochs = 0;
    for (const json& l : lines)
        if (l["type"] == "epoch") {
            ++epochs;
            CHECK(l.contains("test_auc"));
            CHECK(l.contains("test_logloss"));
        }
    CHECK(epochs == 4);

    // eval of the final checkpoint gives the summary's numbers.
    const auto e = run_command(binary() + " eval --config " + dir + "/c.json --set data.hash_bits=18 --checkpoint " +
                               ckpt(out, 4 * 10000 / 50));
    INFO(e.output);
    REQUIRE(e.exit_code == 0);
    const json ev = json::parse(e.output.substr(e.output.find('{')));
    CHECK(ev["test_auc"].get<double>() == Approx(s["test_auc"].get<double>()).epsilon(1e-9));
    CHECK(ev["test_logloss"].get<double>() == Approx(s["test_logloss"].get<double>()).epsilon(1e-9));
    // eval scores the weights alone: a config naming another optimizer (the file of a sweep whose point switched
    // optimizer.name with --set) gives the same numbers, as the dense eval does.
    const auto e2 = run_command(binary() + " eval --config " + dir + "/c.json --set data.hash_bits=18 "
                                "--set optimizer.name=ftrl --checkpoint " + ckpt(out, 4 * 10000 / 50));
    INFO(e2.output);
    REQUIRE(e2.exit_code == 0);
    const json ev2 = json::parse(e2.output.substr(e2.output.find('{')));
    CHECK(ev2["test_auc"] == ev["test_auc"]);
    CHECK(ev2["test_logloss"] == ev["test_logloss"]);
}

TEST_CASE("sparse: 2 ranks x batch B equal 1 rank x batch 2B", "[train][sparse][mpi]") {
    const std::string dir = temp_dir("sparse-equiv");
    constexpr int kSteps = 6, kBatch = 4;
    for (const bool empty : {false, true}) {
        write_two_rank_files(dir, kSteps, kBatch, empty);
        for (const std::string opt : {"sgd", "adagrad", "ftrl"}) {
            for (const std::string how : {"allgather", "dense"}) {
                SECTION(opt + " " + how + (empty ? ", rank 1's rows touch no feature" : "")) {
                    const std::string common = R"(,
                        "optimizer": {"name": ")" + opt + R"(", "lr": 0.2, "lr_scaling": "none"},
                        "sync": {"sparse": ")" + how + R"("}, "checkpoint": {"every_epochs": 1})";
                    const std::string one = dir + "/one-" + opt + how, two = dir + "/two-" + opt + how;
                    write_file(dir + "/one.json", sparse_config("libsvm", dir + "/interleaved.svm",
                                                                dir + "/split.svm", one, common));
                    write_file(dir + "/two.json", sparse_config("libsvm", dir + "/split.svm", dir + "/split.svm",
                                                                two, common));
                    const std::string keys = " --set data.num_features=64 --set optimizer.l1=" +
                                             std::string(opt == "ftrl" ? "0.01" : "0");
                    auto r = run_command(binary() + " train --config " + dir + "/one.json --set train.batch_size=" +
                                         std::to_string(2 * kBatch) + keys);
                    INFO(r.output);
                    REQUIRE(r.exit_code == 0);
                    r = run_command(mpirun(2) + binary() + " train --config " + dir + "/two.json --set train.batch_size=" +
                                    std::to_string(kBatch) + keys);
                    INFO(r.output);
                    REQUIRE(r.exit_code == 0);
                    const json s = read_json(two + "/summary.json");
                    CHECK(s["parameters_identical"] == true);
                    CHECK(s["steps"] == kSteps);
                    CHECK(s["sync"][how + "_steps"] == kSteps);
                    CHECK(s["sync"]["bytes_" + how].get<uint64_t>() > 0);
                    // Table and bias; the AUC over all ranks' test rows is the single rank's too.
                    require_close(checkpoint_parameters(ckpt(one, kSteps), 2), checkpoint_parameters(ckpt(two, kSteps), 2),
                                  2e-6f);
                    const json s1 = read_json(one + "/summary.json");
                    CHECK(s["test_auc"].get<double>() == Approx(s1["test_auc"].get<double>()).margin(1e-6));
                }
            }
        }
    }
}

TEST_CASE("sparse: a resumed run ends where an uninterrupted one does", "[train][sparse][mpi]") {
    const std::string dir = temp_dir("sparse-resume");
    write_svm(dir + "/train.svm", svm_rows(160, 50, 3));
    write_svm(dir + "/test.svm", svm_rows(40, 50, 4));
    const std::string common = R"(, "optimizer": {"name": "ftrl", "lr": 0.3, "l1": 0.1, "l2": 0.1},
        "checkpoint": {"every_epochs": 1})";
    const std::string whole = dir + "/whole", parts = dir + "/parts";
    write_file(dir + "/w.json", sparse_config("libsvm", dir + "/train.svm", dir + "/test.svm", whole, common));
    write_file(dir + "/p.json", sparse_config("libsvm", dir + "/train.svm", dir + "/test.svm", parts, common));
    // 2 ranks x 80 rows, batch 8: 10 steps an epoch; stop inside the second epoch (and once inside the first).
    // A line every 3 steps: the stops at 4 and 13 fall between lines.
    const std::string run = mpirun(2) + binary() + " train --set train.batch_size=8 --set train.epochs=3 "
                            "--set data.shuffle_buffer=16 --set train.log_every_steps=3 --config ";
    auto r = run_command(run + dir + "/w.json");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    r = run_command(run + dir + "/p.json --set train.max_steps=4");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    r = run_command(run + dir + "/p.json --set train.max_steps=13 --set checkpoint.resume=auto");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    {
        // Stopped at 13, past epoch 1's evaluation at step 10: the summary scores the final model, as eval does.
        const json stopped = read_json(parts + "/summary.json");
        const auto e = run_command(mpirun(2) + binary() + " eval --set train.batch_size=8 --set data.shuffle_buffer=16 "
                                   "--config " + dir + "/p.json --checkpoint " + ckpt(parts, 13));
        INFO(e.output);
        REQUIRE(e.exit_code == 0);
        const json line = json::parse(e.output.substr(e.output.find('{')));
        CHECK(line["test_logloss"] == stopped["test_logloss"]);
        CHECK(line["test_auc"] == stopped["test_auc"]);
    }
    r = run_command(run + dir + "/p.json --set checkpoint.resume=auto");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const json s = read_json(parts + "/summary.json");
    CHECK(s["steps"] == 30);
    CHECK(s["steps_this_run"] == 17);
    CHECK(s["resumed"] == true);
    // Bit for bit: the same batches in the same order, the same sums.
    CHECK(checkpoint_parameters(ckpt(whole, 30), 2) == checkpoint_parameters(ckpt(parts, 30), 2));
    CHECK(read_json(whole + "/summary.json")["test_logloss"] == s["test_logloss"]);
    // The same metrics lines: each checkpoint inside an epoch carries the steps since the last line, so the resumed
    // run's next line (steps 4-6, 13-15) is the mean over the same steps as the uninterrupted run's.
    const auto lines = [](const std::string& run_dir) {
        std::vector<std::pair<int64_t, double>> v;
        for (const json& l : read_jsonl(run_dir + "/metrics.jsonl"))
            if (l["type"] == "step") v.emplace_back(l["global_step"].get<int64_t>(), l["loss"].get<double>());
        return v;
    };
    const auto lw = lines(whole), lp = lines(parts);
    CHECK(lw.size() == 10);  // steps 3, 6, ..., 30
    // Plus each max_steps stop's own line (steps 4 and 13), which does not restart the window.
    auto lp_regular = lp;
    std::erase_if(lp_regular, [](const auto& l) { return l.first == 4 || l.first == 13; });
    CHECK(lp.size() == lw.size() + 2);
    CHECK(lp_regular == lw);
}

TEST_CASE("sparse: one core per rank parses in the gathers' waits and trains the same bits", "[train][sparse][mpi]") {
    // Bound one to a core, a rank parses on its training thread, and while it waits for the other rank in a
    // gather it parses the other rank's next rows, then its own (SparseRun::parse_ahead_while_waiting). The
    // batches, so the bits, must not change. A busy loop on rank 0's core makes rank 1 wait at every step.
    if (std::thread::hardware_concurrency() < 2) {
        WARN("skipped: needs 2 CPUs, one per rank");
        return;
    }
    const std::string dir = temp_dir("sparse-ahead");
    write_svm(dir + "/train.svm", svm_rows(800, 60, 31));
    write_svm(dir + "/test.svm", svm_rows(80, 60, 32));
    const std::string common = R"(, "optimizer": {"name": "adagrad", "lr": 0.1}, "checkpoint": {"every_epochs": 1})";
    const std::string threads = dir + "/threads", bound = dir + "/bound", alone = dir + "/alone";
    write_file(dir + "/t.json", sparse_config("libsvm", dir + "/train.svm", dir + "/test.svm", threads, common));
    write_file(dir + "/b.json", sparse_config("libsvm", dir + "/train.svm", dir + "/test.svm", bound, common));
    write_file(dir + "/a.json", sparse_config("libsvm", dir + "/train.svm", dir + "/test.svm", alone, common));
    const std::string args = " train --set train.batch_size=8 --set train.epochs=1 --config ";
    auto r = run_command(mpirun(2) + binary() + args + dir + "/t.json");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    // Bound, with peer parsing (the default: rank 1, waiting, parses rank 0's next rows) and without it.
    for (const std::string peers : {"1", "0"}) {
        r = run_command("(taskset -c 0 sh -c 'while :; do :; done' & hog=$!; export RINGTRAIN_PEER_PARSING=" + peers +
                        "; mpirun --allow-run-as-root --oversubscribe --bind-to core --mca btl self,vader,tcp "
                        "-x RINGTRAIN_PEER_PARSING -np 2 " +
                        binary() + args + dir + (peers == "1" ? "/b.json" : "/a.json") + "; rc=$?; kill $hog; exit $rc)");
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
    }
    const json st = read_json(threads + "/summary.json"), sb = read_json(bound + "/summary.json"),
               sa = read_json(alone + "/summary.json");
    CHECK(sb["steps"] == 50);
    CHECK(checkpoint_parameters(ckpt(threads, 50), 2) == checkpoint_parameters(ckpt(bound, 50), 2));
    CHECK(checkpoint_parameters(ckpt(alone, 50), 2) == checkpoint_parameters(ckpt(bound, 50), 2));
    CHECK(st["test_logloss"] == sb["test_logloss"]);
    double bound_waits = 0;
    for (const json& v : sb["sync"]["parse_in_waits_s_per_rank"]) bound_waits += v.get<double>();
    CHECK(bound_waits > 0);  // rows were parsed inside the waits
    for (const json& v : st["sync"]["parse_in_waits_s_per_rank"]) CHECK(v.get<double>() == 0);  // a parse thread
    // Peer parsing: on where ranks parse on their training threads; rank 1 parsed some of the hogged rank 0's rows,
    // and every row parsed for a peer was taken by it.
    const json& pb = sb["peer_parsing"];
    CHECK(pb["on"] == true);
    CHECK(pb["rows_from_peers_per_rank"][0].get<int64_t>() > 0);
    CHECK(pb["rows_from_peers_per_rank"][0] == pb["rows_for_peers_per_rank"][1]);
    CHECK(pb["rows_from_peers_per_rank"][1] == pb["rows_for_peers_per_rank"][0]);
    CHECK(st["peer_parsing"]["on"] == false);
    CHECK(st["peer_parsing"]["off_because"].get<std::string>().find("parse thread") != std::string::npos);
    CHECK(sa["peer_parsing"]["on"] == false);
    CHECK(sa["peer_parsing"]["rows_from_peers_per_rank"][0] == 0);
}

namespace {
// A 2-rank local SGD run with AdaGrad on 96 generated rows: its output and summary.json.
std::pair<CommandResult, json> run_local_sgd(const std::string& name, int period, int batch) {
    const std::string dir = temp_dir(name);
    write_svm(dir + "/train.svm", svm_rows(96, 50, 8));
    write_svm(dir + "/test.svm", svm_rows(40, 50, 9));
    const std::string out = dir + "/out";
    write_file(dir + "/c.json", sparse_config("libsvm", dir + "/train.svm", dir + "/test.svm", out, R"(,
        "optimizer": {"name": "adagrad", "lr": 0.1}, "sync": {"mode": "local_sgd", "local_sgd_period": )" +
                                                                       std::to_string(period) + "}"));
    const auto r = run_command(mpirun(2) + binary() + " train --config " + dir + "/c.json --set train.batch_size=" +
                               std::to_string(batch));
    return {r, r.exit_code == 0 ? read_json(out + "/summary.json") : json()};
}
}  // namespace

TEST_CASE("sparse: local SGD averages the model every local_sgd_period steps", "[train][sparse][mpi]") {
    const auto [r, s] = run_local_sgd("sparse-local", 4, 6);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(s["steps"] == 8);
    CHECK(s["sync"]["local_sgd_averages"].get<int64_t>() >= 2);
    CHECK(s["sync"]["allgather_steps"] == 0);
    CHECK(s["sync"]["dense_steps"] == 0);
    CHECK(s["sync"]["sparse_update"].is_null());  // no gradient sync, so no owners
    CHECK(s["parameters_identical"] == true);
    CHECK(s["predicted"]["why"].get<std::string>().find("local_sgd") != std::string::npos);
}

TEST_CASE("sparse: a local SGD run predicts itself, the average of every tensor as its exchange",
          "[train][sparse][mpi][predict]") {
    const auto [r, s] = run_local_sgd("sparse-local-predicted", 2, 4);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    REQUIRE(s["steps"] == 12);
    const json& p = s["predicted"];
    INFO(p.dump(1));
    REQUIRE(p.contains("step_s"));
    CHECK(p["setting"].get<std::string>().find("every 2 steps") != std::string::npos);
    // The table, the bias and AdaGrad's accumulator for each, every second step; and the opening allreduce of
    // every step is a term of its own, not an exchange entry.
    REQUIRE(p["exchange"].size() == 1);
    const double features = s["num_features"].get<double>(), outs = s["out_features"].get<double>();
    CHECK(p["exchange"][0]["bytes"].get<double>() == Approx(4.0 * 2 * (features * outs + outs)));
    CHECK(p["exchange"][0]["per_step"].get<double>() == Approx(0.5));
    const double measured = p["measured_step_s"].get<double>();
    CHECK(p["error"].get<double>() == Approx((p["step_s"].get<double>() - measured) / measured).epsilon(1e-6));
    for (const auto& [term, seconds] : p["terms_s"].items()) CHECK(seconds.get<double>() >= 0);
    CHECK(r.output.find("compute: ") != std::string::npos);
}

TEST_CASE("sparse: the exact AUC of a checkpoint is the same bits at 1, 2 and 3 ranks", "[train][sparse][mpi]") {
    // Rank 0 gathers every rank's (score, label) pairs in rank order, which is the file's order: the same list
    // as one rank's, so the same AUC to the last bit.
    const std::string dir = temp_dir("sparse-auc");
    write_svm(dir + "/train.svm", svm_rows(120, 60, 31));
    write_svm(dir + "/test.svm", svm_rows(90, 60, 32));
    const std::string out = dir + "/out";
    write_file(dir + "/c.json", sparse_config("libsvm", dir + "/train.svm", dir + "/test.svm", out, R"(,
        "optimizer": {"name": "adagrad", "lr": 0.1}, "checkpoint": {"every_epochs": 1})"));
    auto r = run_command(binary() + " train --config " + dir + "/c.json --set train.batch_size=12");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::vector<double> aucs;
    for (int ranks : {1, 2, 3}) {
        r = run_command(mpirun(ranks) + binary() + " eval --config " + dir + "/c.json --checkpoint " + ckpt(out, 10));
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        const json ev = json::parse(r.output.substr(r.output.find('{')));
        CHECK(ev["test_samples"] == 90);
        aucs.push_back(ev["test_auc"].get<double>());
    }
    CHECK(aucs[0] > 0.5);
    CHECK(aucs[1] == aucs[0]);
    CHECK(aucs[2] == aucs[0]);
}

TEST_CASE("sparse: a 2-rank run predicts its own step (summary.json predicted, the scaling line)",
          "[train][sparse][mpi]") {
    const std::string dir = temp_dir("sparse-predicted");
    write_svm(dir + "/train.svm", svm_rows(640, 200, 12));
    write_svm(dir + "/test.svm", svm_rows(40, 200, 13));
    for (const std::string how : {"allgather", "dense"}) {
        SECTION(how) {
            const std::string out = dir + "/" + how;
            write_file(dir + "/c.json", sparse_config("libsvm", dir + "/train.svm", dir + "/test.svm", out, R"(,
                "optimizer": {"name": "adagrad", "lr": 0.1}, "sync": {"sparse": ")" + how + R"("})"));
            const auto r = run_command(mpirun(2) + binary() + " train --config " + dir + "/c.json "
                                       "--set train.batch_size=16 --set data.num_features=256");
            INFO(r.output);
            REQUIRE(r.exit_code == 0);
            const json s = read_json(out + "/summary.json");
            INFO(s.dump(1));
            REQUIRE(s.contains("predicted"));
            const json& p = s["predicted"];
            REQUIRE_FALSE(p.contains("why"));
            for (const char* key : {"step_s", "samples_per_s", "efficiency", "measured_step_s"})
                CHECK(p[key].get<double>() > 0);
            // (measured - predicted) / measured: either sign, below 1 (a prediction is never zero or negative).
            CHECK(std::isfinite(p["error"].get<double>()));
            CHECK(p["error"].get<double>() > -1.0);  // a prediction is a positive time
            CHECK(p["dominant"].get<std::string>().size() > 0);
            for (const char* key : {"alpha_s", "beta_s_per_byte"}) CHECK(p["link"][key].get<double>() >= 0);
            CHECK_THAT(p["link"]["source"].get<std::string>(), Catch::Contains("sparse gradient exchange"));
            for (const char* key : {"input", "compute", "optimizer", "straggler", "communication", "latency", "merge"})
                CHECK(p["terms_s"].contains(key));
            // The step's exchange: the collective this sync way ran, on every step, with its bytes, then the opening
            // collective: on allgather steps the owners' updated rows (owner updates are the default), on dense steps
            // the opening allreduce.
            REQUIRE(p["exchange"].size() == 2u);
            CHECK(p["exchange"][0]["name"] == (how == "allgather" ? "slot allgather" : "dense allreduce"));
            for (const json& c : p["exchange"]) {
                CHECK(c["per_step"].get<double>() == 1.0);
                CHECK(c["bytes"].get<double>() > 0);
            }
            CHECK(p["exchange"][1]["name"] == (how == "allgather" ? "updated rows allgather (opening)" : "opening allreduce"));
            // The merge is measured on allgather steps only; the dense way has none.
            if (how == "allgather") CHECK(p["merge_rows_per_step"].get<double>() > 0);
            else CHECK(p["merge_rows_per_step"].get<double>() == 0);
            CHECK(p["step_s"].get<double>() == Approx(p["measured_step_s"].get<double>() * (1 + p["error"].get<double>())));
            CHECK_THAT(r.output, Catch::Contains("compute: ") && Catch::Contains("predicted step"));
        }
    }
}

TEST_CASE("sparse: owner updates (the default) give replicated updates' parameters and optimizer state, to the bit",
          "[train][sparse][mpi]") {
    const std::string dir = temp_dir("sparse-owner");
    write_svm(dir + "/train.svm", svm_rows(120, 64, 31));
    write_svm(dir + "/test.svm", svm_rows(30, 64, 32));
    for (const std::string opt : {"sgd", "adagrad", "ftrl"}) {
        INFO(opt);
        std::vector<char> tensors[2];
        json summaries[2];
        for (int i = 0; i < 2; ++i) {
            const std::string update = i == 0 ? "owner" : "replicated", out = dir + "/" + opt + "-" + update;
            write_file(dir + "/c.json", sparse_config("libsvm", dir + "/train.svm", dir + "/test.svm", out, R"(,
                "optimizer": {"name": ")" + opt + R"(", "lr": 0.2}, "sync": {"sparse": "allgather"},
                "checkpoint": {"every_epochs": 1})"));
            const auto r = run_command(mpirun(2) + binary() + " train --config " + dir + "/c.json --set "
                                       "train.batch_size=6 --set train.epochs=2 --set data.num_features=64" +
                                       (i == 0 ? "" : " --set sync.sparse_update=replicated"));
            INFO(r.output);
            REQUIRE(r.exit_code == 0);
            summaries[i] = read_json(out + "/summary.json");
            // Every tensor of the checkpoint: table, bias, the optimizer's state.
            const std::vector<float> all = checkpoint_parameters(ckpt(out, 20), 100);
            tensors[i].resize(all.size() * sizeof(float));
            std::memcpy(tensors[i].data(), all.data(), tensors[i].size());
        }
        CHECK(summaries[0]["sync"]["sparse_update"] == "owner");
        CHECK(summaries[1]["sync"]["sparse_update"] == "replicated");
        REQUIRE(tensors[0].size() >= 65 * sizeof(float));  // 64 rows and the bias, then any state
        CHECK(tensors[0] == tensors[1]);
        for (const json& s : summaries) {
            CHECK(s["parameters_identical"] == true);
            CHECK(s["sync"]["allgather_steps"] == 20);
        }
        // The owners' updated rows travel too, and are counted.
        CHECK(summaries[0]["sync"]["bytes_allgather"].get<uint64_t>() > summaries[1]["sync"]["bytes_allgather"].get<uint64_t>());
        CHECK(summaries[0]["test_logloss"] == summaries[1]["test_logloss"]);
    }
}

TEST_CASE("sparse: a make-clicklog file (.gz, 2 ranks, ftrl) is learned well past the constant predictor",
          "[train][sparse][mpi]") {
    const std::string dir = temp_dir("sparse-generated");
    // The generator's model has a weight on every hashed feature, more than 10,000 rows can pin down, so the bar
    // is the constant predictor (the base rate) rather than the true model's loss (reached with far more rows).
    const std::string gen = binary() + " make-clicklog --format criteo --hash-bits 10 --model-seed 3 ";
    auto r = run_command(gen + "--rows 10000 --seed 1 --out " + dir + "/train.txt.gz");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    r = run_command(gen + "--rows 3000 --seed 2 --out " + dir + "/test.txt --truth " + dir + "/truth.json");
    REQUIRE(r.exit_code == 0);
    const json truth = read_json(dir + "/truth.json");
    const std::string out = dir + "/out";
    write_file(dir + "/c.json", sparse_config("criteo", dir + "/train.txt.gz", dir + "/test.txt", out, R"(,
        "optimizer": {"name": "ftrl", "lr": 0.1, "l2": 1.0, "lr_scaling": "none"}, "checkpoint": {"every_epochs": 0})"));
    r = run_command(mpirun(2) + binary() + " train --config " + dir + "/c.json --set data.hash_bits=10 "
                    "--set train.batch_size=25 --set train.epochs=3");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const json s = read_json(out + "/summary.json");
    INFO(s.dump(1) << "\ntruth: " << truth.dump());
    CHECK(s["test_logloss"].get<double>() < truth["constant_logloss"].get<double>() - 0.02);
    CHECK(s["test_logloss"].get<double>() < truth["true_logloss"].get<double>() + 0.08);
    CHECK(s["test_auc"].get<double>() > 0.65);
    CHECK(s["num_features"] == 1024);
    CHECK(s["parameters_identical"] == true);
    CHECK(s["sync"]["allgather_steps"].get<int64_t>() + s["sync"]["dense_steps"].get<int64_t>() == s["steps"]);
}

TEST_CASE("sparse: K classes with softmax; the ranks' agreement; a rank with no rows", "[train][sparse][mpi]") {
    const std::string dir = temp_dir("sparse-misc");
    // Three classes: the label is the class of the row's first feature (index mod 3).
    std::vector<SvmRow> rows = svm_rows(300, 30, 5);
    for (SvmRow& r : rows) r.label = r.features.empty() ? 0 : r.features[0].first % 3;
    write_svm(dir + "/k3.svm", rows);
    write_file(dir + "/k3.json", R"({"name": "k3", "layers": [{"type": "sparse_linear", "out_features": 3}],
                                      "loss": "softmax_cross_entropy"})");
    std::string cfg = sparse_config("libsvm", dir + "/k3.svm", dir + "/k3.svm", dir + "/k3", R"(,
        "optimizer": {"name": "adagrad", "lr": 0.5})");
    cfg.replace(cfg.find(source_dir() + "/models/sparse_logreg.json"),
                (source_dir() + "/models/sparse_logreg.json").size(), dir + "/k3.json");
    write_file(dir + "/k3c.json", cfg);
    auto r = run_command(mpirun(2) + binary() + " train --config " + dir + "/k3c.json --set train.batch_size=10 "
                         "--set train.epochs=4");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const json s = read_json(dir + "/k3/summary.json");
    CHECK(s["out_features"] == 3);
    CHECK(s["test_auc"].is_null());  // defined for one output only
    CHECK(s["test_accuracy"].get<double>() > 0.8);

    // Ranks started on different training files: exit 2 on every rank, naming the key and both values.
    write_svm(dir + "/other.svm", svm_rows(300, 30, 6));
    const std::string base = binary() + " train --config " + dir + "/k3c.json --set output.dir=" + dir + "/dis";
    r = run_command(mpirun(1) + base + " : -np 1 " + base + " --set data.train_file=" + dir + "/other.svm");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("data.train_file"));
    CHECK_THAT(r.output, Catch::Contains("other.svm"));

    // One rank on the sparse path, the other on the dense one: exit 2 before either path's collectives.
    r = run_command(mpirun(1) + base + " : -np 1 " + base + " --set model=" + source_dir() +
                    "/models/logreg.json --set data.format=synthetic --set data.synthetic_shape=[784] "
                    "--set optimizer.name=sgd");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("ranks disagree on data.format: rank 0 takes the sparse path, rank 1 the dense one"));

    // A training file with one row at 2 ranks: rank 1's share is empty, so no epoch can run: exit 2, no hang.
    write_svm(dir + "/one.svm", svm_rows(1, 30, 7));
    r = run_command(mpirun(2) + binary() + " train --config " + dir + "/k3c.json --set data.train_file=" + dir +
                    "/one.svm --set output.dir=" + dir + "/one");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("one.svm: a rank's share of the file holds no rows"));
}

TEST_CASE("sparse: output.progress prints step lines and epoch results on rank 0, nothing with none", "[train][sparse]") {
    const std::string dir = temp_dir("sparse-progress");
    write_svm(dir + "/train.svm", svm_rows(160, 50, 3));
    write_svm(dir + "/test.svm", svm_rows(40, 50, 4));
    write_file(dir + "/c.json", sparse_config("libsvm", dir + "/train.svm", dir + "/test.svm", dir + "/out", ""));
    // 160 rows at batch 16: 10 steps an epoch, a line every 5. The first pass has not counted its steps yet.
    const std::string run = binary() + " train --config " + dir + "/c.json --set train.batch_size=16 "
                            "--set train.epochs=2 --set train.log_every_steps=5 --set output.progress=";
    auto r = run_command(run + "lines");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("epoch 1/2 step 5 loss"));
    CHECK_THAT(r.output, Catch::Contains("epoch 1/2: train loss"));
    CHECK_THAT(r.output, Catch::Contains("epoch 2/2 step 10/10 loss"));
    r = run_command(run + "none --set output.dir=" + dir + "/quiet");
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, !Catch::Contains("epoch 1/2"));
}
