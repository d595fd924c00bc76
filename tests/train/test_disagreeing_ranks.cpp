// Ranks started with different configs (mpirun MPMD, one --set on rank 1 only) must all exit 2 quickly, naming the
// first differing key and both values, with nothing trained; and a rank stuck in set-up must not hold the job
// past sync.setup_timeout_s.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>

#include "fixtures.hpp"

using namespace rt_test;

namespace {

// Rank 0 runs `config`, rank 1 the same with `rank1_sets` added; at most 60 s.
CommandResult run_mpmd(const std::string& config, const std::string& rank1_sets) {
    const std::string args = " train --config " + config;
    return run_command("timeout 60 " + mpirun(1) + binary() + args + " : -np 1 " + binary() + args + " " + rank1_sets);
}

}  // namespace

TEST_CASE("ranks with different configs exit 2 naming the first differing key, nothing trained", "[train][mpi][agree]") {
    const std::string dir = temp_dir("disagree");
    write_file(dir + "/tiny.json", kTinyCnn);
    struct Case {
        std::string set, key, rank0, rank1;
    };
    const Case cases[] = {
        {"train.batch_size=32", "train.batch_size", "8", "32"},
        {"optimizer.name=adam", "optimizer.name", "sgd", "adam"},
        {"optimizer.lr=0.5", "optimizer.lr", "0.05", "0.5"},
        {"sync.backend=mpi", "sync.backend", "ring", "mpi"},
        {"sync.compression=fp16", "sync.compression", "none", "fp16"},
        {"sync.fusion_bytes=0", "sync.fusion_bytes", "67108864", "0"},
        {"sync.cycle_time_ms=0", "sync.cycle_time_ms", "1.0", "0.0"},
        {"train.seed=12", "train.seed", "7", "12"},
        {"train.max_steps=7", "train.max_steps", "0", "7"},
        {"checkpoint.every_steps=3", "checkpoint.every_steps", "0", "3"},
        {"data.synthetic_train_size=960", "data.synthetic_train_size", "480", "960"},
    };
    for (const Case& c : cases) {
        SECTION(c.set) {
            const std::string out = dir + "/out-" + c.key;
            write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", out, R"(, "optimizer": {"lr": 0.05})"));
            const auto r = run_mpmd(dir + "/c.json", "--set " + c.set);
            INFO(r.output);
            CHECK(r.exit_code == 2);
            CHECK(r.seconds < 30);
            // Both ranks say it, with both values.
            const std::string both = "ranks disagree on " + c.key + ": rank 0 has " + c.rank0 + ", rank 1 has " +
                                     c.rank1 + "; every rank must run the same config";
            CHECK_THAT(r.output, Catch::Contains("rank 0: " + both));
            CHECK_THAT(r.output, Catch::Contains("rank 1: " + both));
            CHECK_FALSE(std::filesystem::exists(out + "/summary.json"));
            CHECK_FALSE(std::filesystem::exists(out + "/metrics.jsonl"));
            CHECK_FALSE(std::filesystem::exists(out + "/checkpoints"));
        }
    }
}

TEST_CASE("a rank whose arguments do not parse, or that runs another command, ends every rank with exit 2",
          "[train][mpi][agree]") {
    // Both used to hang: the rank left before the set-up agreement, or ran other collectives than the others.
    const std::string dir = temp_dir("disagree-args");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out"));
    const std::string train = binary() + " train --config " + dir + "/c.json";
    struct Case {
        std::string rank1, says;
    };
    const Case cases[] = {
        {train + " --set", "rank 1: --set needs a value"},
        {train + " --config " + dir + "/c.json", "rank 1: --config given twice"},
        {train + " trian", "rank 1: unknown argument 'trian'"},
        {binary() + " info --config " + dir + "/c.json", "rank 1: the ranks were given different commands (this one: 'info')"},
        {binary() + " --help", "rank 0: the ranks were given different commands (this one: 'train')"},
    };
    for (const Case& c : cases) {
        INFO("rank 1: " << c.rank1);
        const auto r = run_command("timeout 60 " + mpirun(1) + train + " : -np 1 " + c.rank1);
        INFO(r.output);
        CHECK(r.exit_code == 2);
        CHECK(r.seconds < 30);
        CHECK_THAT(r.output, Catch::Contains(c.says));
        CHECK_FALSE(std::filesystem::exists(dir + "/out/metrics.jsonl"));  // nothing trained
    }
}

TEST_CASE("output.progress may differ between ranks: the run trains", "[train][mpi][agree]") {
    const std::string dir = temp_dir("agree");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out"));
    // Read by rank 0 only (how it draws progress), so it is the one key left out of the agreement.
    const std::string args = " train --config " + dir + "/c.json --set train.max_steps=3";
    const auto ok = run_command("timeout 60 " + mpirun(1) + binary() + args + " : -np 1 " + binary() + args +
                                " --set output.progress=lines");
    INFO(ok.output);
    CHECK(ok.exit_code == 0);
    CHECK(std::filesystem::exists(dir + "/out/summary.json"));
}

TEST_CASE("a rank stuck before the agreement is aborted after sync.setup_timeout_s", "[train][mpi][agree]") {
    const std::string dir = temp_dir("setup-timeout");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out"));
    // Rank 1's data files are FIFOs nobody writes: opening them blocks for ever.
    const std::string fifo = dir + "/fifo-data";
    std::filesystem::create_directories(fifo);
    for (const char* name : {"/train-images-idx3-ubyte", "/train-labels-idx1-ubyte", "/t10k-images-idx3-ubyte",
                             "/t10k-labels-idx1-ubyte"})
        REQUIRE(mkfifo((fifo + name).c_str(), 0600) == 0);
    const std::string timeout = " --set sync.setup_timeout_s=3";
    // Rank 1 (stuck) carries the short deadline; rank 0 waits in the agreement until rank 1's deadline ends the job.
    const auto r = run_mpmd(dir + "/c.json", timeout + " --set data.format=idx --set data.dir=" + fifo +
                                                 " --set data.mean=0 --set data.std=1");
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);  // not killed by `timeout`
    CHECK(r.seconds < 30);
    CHECK_THAT(r.output, Catch::Contains("set-up has not finished after 3 s (sync.setup_timeout_s = 3)"));
    CHECK_FALSE(std::filesystem::exists(dir + "/out/summary.json"));
}

TEST_CASE("a checkpoint read that never returns on rank 0 ends the job after sync.setup_timeout_s",
          "[train][mpi][agree][resume]") {
    // Only rank 0 reads the checkpoint; the others wait for it in the resume's agreement, which no stall watch
    // covered: a hung file system held the whole job for ever. Here `latest` is a FIFO nobody writes.
    const std::string dir = temp_dir("resume-timeout");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out"));
    std::filesystem::create_directories(dir + "/out/checkpoints");
    REQUIRE(mkfifo((dir + "/out/checkpoints/latest").c_str(), 0600) == 0);
    const std::string args =
        " train --config " + dir + "/c.json --set checkpoint.resume=auto --set sync.setup_timeout_s=3";
    const auto r = run_command("timeout 60 " + mpirun(1) + binary() + args + " : -np 1 " + binary() + args);
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);  // not killed by `timeout`
    CHECK(r.seconds < 30);
    CHECK_THAT(r.output, Catch::Contains("rank 0: set-up has not finished after 3 s (sync.setup_timeout_s = 3): this "
                                         "rank is still reading the checkpoint to resume from"));
    CHECK_FALSE(std::filesystem::exists(dir + "/out/summary.json"));
}

TEST_CASE("eval with a different checkpoint on each rank exits 2 naming both, instead of mixing two models",
          "[train][mpi][agree][eval]") {
    const std::string dir = temp_dir("eval-disagree");
    write_file(dir + "/tiny.json", kTinyCnn);
    std::string ckpt[2];
    for (int i = 0; i < 2; ++i) {
        const std::string out = dir + "/out" + std::to_string(i);
        write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", out));
        const auto t = run_command("timeout 60 " + binary() + " train --config " + dir + "/c.json --set train.max_steps=" +
                                   std::to_string(2 + 2 * i));
        INFO(t.output);
        REQUIRE(t.exit_code == 0);
        for (const auto& e : std::filesystem::directory_iterator(out + "/checkpoints"))
            if (e.path().extension() == ".bin") ckpt[i] = e.path().string();
        REQUIRE_FALSE(ckpt[i].empty());
    }
    const std::string eval = binary() + " eval --config " + dir + "/c.json --checkpoint ";
    const auto r = run_command("timeout 60 " + mpirun(1) + eval + ckpt[0] + " : -np 1 " + eval + ckpt[1]);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    for (const char* rank : {"rank 0: ", "rank 1: "})
        CHECK_THAT(r.output, Catch::Contains(std::string(rank) + "eval: the ranks loaded different models from "
                                                                 "--checkpoint: rank 0 read " + ckpt[0]) &&
                                 Catch::Contains(", rank 1 read " + ckpt[1]));
    CHECK_THAT(r.output, !Catch::Contains("test_accuracy"));
    // The same file on both ranks evaluates, also reached by another path (a link, as another host's mount would).
    std::filesystem::create_symlink(ckpt[1], dir + "/same.bin");
    const auto same = run_command("timeout 60 " + mpirun(1) + eval + ckpt[1] + " : -np 1 " + eval + dir + "/same.bin");
    INFO(same.output);
    CHECK(same.exit_code == 0);
    CHECK_THAT(same.output, Catch::Contains("test_accuracy"));
}

TEST_CASE("the same data path holding other files on another rank's host is refused at start-up",
          "[train][mpi][agree][image]") {
    // The paths agree as written, the sizes and classes too; only the contents differ (each rank started in its own
    // working folder, as two hosts with different copies would be). It trained on the mix before, with exit 0.
    const std::string dir = temp_dir("disagree-contents");
    for (const char* host : {"a", "b"})
        for (const char* split : {"train", "test"}) {
            const auto g = run_command(binary() + " make-image-folder --out " + dir + "/" + host + "/" + split +
                                       " --classes 2 --per-class 6 --size 16x16 --seed " +
                                       (std::string(split) == "train" && std::string(host) == "b" ? "2" : "1"));
            INFO(g.output);
            REQUIRE(g.exit_code == 0);
        }
    write_file(dir + "/model.json", R"({"name": "tiny", "input": [1, 8, 8],
      "layers": [{"type": "flatten"}, {"type": "linear", "out_features": 2}], "loss": "softmax_cross_entropy"})");
    write_file(dir + "/c.json", R"({"model": ")" + dir + R"(/model.json",
      "data": {"format": "image_folder", "train_dir": "train", "test_dir": "test", "image_size": [8, 8],
               "channels": 1, "mean": [0.5], "std": [0.25]},
      "train": {"batch_size": 2, "epochs": 1, "max_steps": 2}, "device": "cpu",
      "output": {"dir": ")" + dir + R"(/out", "progress": "none"}})");
    const std::string train = binary() + " train --config " + dir + "/c.json";
    const auto r = run_command("timeout 60 " + mpirun(1) + "-wdir " + dir + "/a " + train + " : -np 1 -wdir " + dir +
                               "/b " + train);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("rank 0: ranks disagree on the training data (a fingerprint of its files"));
    CHECK_THAT(r.output, Catch::Contains("rank 1: ranks disagree on the training data"));
    CHECK_FALSE(std::filesystem::exists(dir + "/out/metrics.jsonl"));
    // The same copy on both: it trains.
    const auto same = run_command("timeout 60 " + mpirun(1) + "-wdir " + dir + "/a " + train + " : -np 1 -wdir " +
                                  dir + "/a " + train);
    INFO(same.output);
    CHECK(same.exit_code == 0);
}

TEST_CASE("predict --measure with another config on one rank exits 2 on every rank", "[train][mpi][agree][predict]") {
    // Every rank profiles side by side: one rank's other batch size made the spread and the link another run's, and
    // the table came out with exit 0.
    const std::string dir = temp_dir("disagree-predict");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out"));
    const std::string predict = binary() + " predict --config " + dir + "/c.json --measure --steps 2";
    const auto r = run_command("timeout 60 " + mpirun(1) + predict + " : -np 1 " + predict +
                               " --set train.batch_size=16");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    for (const char* rank : {"rank 0: ", "rank 1: "})
        CHECK_THAT(r.output, Catch::Contains(std::string(rank) + "ranks disagree on train.batch_size: rank 0 has 8, "
                                                                 "rank 1 has 16"));
    CHECK_THAT(r.output, !Catch::Contains("efficiency"));
}
