// Damaged, crafted, foreign and misplaced checkpoints: each case builds the bad situation from a real run's output
// and checks the exit code, that the message names the file and the tensor or key, and that nothing a previous
// run wrote was overwritten. resume=auto falls back to an older checkpoint that verifies, and says so.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "checkpoint_surgery.hpp"
#include "fixtures.hpp"

using namespace rt_test;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

// Momentum, so the checkpoints hold optimizer state after the parameters.
constexpr const char* kCheckpointing =
    R"(, "checkpoint": {"every_steps": 20, "keep": 5}, "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9})";

// One 1-rank run stopped at step 40, with checkpoints at steps 20 and 40, copied into a fresh folder per case.
class Scene {
public:
    explicit Scene(const std::string& name) : dir_(temp_dir("integrity-" + name)) {
        write_file(dir_ + "/tiny.json", kTinyCnn);
        write_file(dir_ + "/c.json", tiny_config(dir_ + "/tiny.json", out(), kCheckpointing));
        const auto r = run_command(binary() + " train --config " + dir_ + "/c.json --set train.max_steps=40");
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        metrics_before_ = slurp(out() + "/metrics.jsonl");
        REQUIRE(!metrics_before_.empty());
    }
    std::string out() const { return dir_ + "/out"; }
    std::string ckpt(int64_t step) const {
        return out() + "/checkpoints/ckpt-" + std::string(9 - std::to_string(step).size(), '0') + std::to_string(step) + ".bin";
    }
    std::string dir() const { return dir_; }
    CommandResult train(const std::string& sets) const {
        return run_command(binary() + " train --config " + dir_ + "/c.json " + sets);
    }
    CommandResult eval(const std::string& checkpoint) const {
        return run_command(binary() + " eval --config " + dir_ + "/c.json --checkpoint " + checkpoint);
    }
    bool metrics_intact() const { return slurp(out() + "/metrics.jsonl") == metrics_before_; }
    const std::string& metrics_before() const { return metrics_before_; }

private:
    std::string dir_;
    std::string metrics_before_;
};

// Flips an exponent bit of the first element of the checkpoint's tensor number `index`; returns its name.
std::string flip_tensor_bit(const std::string& path, size_t index) {
    const CheckpointBytes c = read_checkpoint_bytes(path);
    uint64_t offset = c.data_offset();
    for (size_t i = 0; i < index; ++i) {
        uint64_t n = 1;
        for (const auto& d : c.header["tensors"][i]["shape"]) n *= d.get<uint64_t>();
        offset += 4 * n;
    }
    flip_bit(path, offset + 3, 6);
    return c.header["tensors"][index]["name"];
}

void require_exit2_naming(const CommandResult& r, const std::vector<std::string>& words) {
    INFO(r.output);
    CHECK(r.exit_code == 2);
    for (const auto& w : words) CHECK_THAT(r.output, Catch::Contains(w));
    CHECK_THAT(r.output, !Catch::Contains("json.exception"));
}

}  // namespace

TEST_CASE("a bit flip in a tensor or the header is found and named", "[train][checkpoint][integrity]") {
    const Scene s("flip");
    const std::string latest = s.ckpt(40);
    SECTION("tensor, resumed explicitly: exit 2 naming file and tensor, nothing overwritten") {
        const std::string name = flip_tensor_bit(latest, 2);
        require_exit2_naming(s.train("--set checkpoint.resume=" + latest), {latest, "'" + name + "'", "checksum"});
        CHECK(s.metrics_intact());
        require_exit2_naming(s.eval(latest), {latest, "'" + name + "'", "checksum"});
    }
    SECTION("optimizer state tensor") {
        const CheckpointBytes c = read_checkpoint_bytes(latest);
        const size_t last = c.header["tensors"].size() - 1;
        REQUIRE(last >= c.header["parameter_tensors"].get<size_t>());
        const std::string name = flip_tensor_bit(latest, last);
        require_exit2_naming(s.train("--set checkpoint.resume=" + latest), {latest, "'" + name + "'", "checksum"});
    }
    SECTION("header") {
        const CheckpointBytes c = read_checkpoint_bytes(latest);
        const auto at = c.bytes.find("\"global_step\":40");
        REQUIRE(at != std::string::npos);
        flip_bit(latest, at + std::strlen("\"global_step\":"), 0);  // 40 -> 50: still valid JSON
        require_exit2_naming(s.eval(latest), {latest, "header fails its checksum"});
    }
    SECTION("the damaged latest is passed over for the older checkpoint, and resume says so") {
        const std::string name = flip_tensor_bit(latest, 0);
        const auto r = s.train("--set checkpoint.resume=auto --set train.max_steps=50");
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        CHECK_THAT(r.output, Catch::Contains("warning: resuming from " + s.ckpt(20) + ", the newest checkpoint that verifies"));
        CHECK_THAT(r.output, Catch::Contains("'" + name + "' fails its checksum"));
        const auto summary = read_json(s.out() + "/summary.json");
        CHECK(summary["resumed_from"] == s.ckpt(20));
        CHECK(summary["steps"] == 50);
        CHECK(summary["steps_this_run"] == 30);
        // The old lines up to the checkpoint (step 20) are kept, those after it go: the resumed run logs steps 21
        // on, and every step has one line.
        std::vector<int64_t> steps;
        for (const auto& line : read_jsonl(s.out() + "/metrics.jsonl"))
            if (line["type"] == "step") steps.push_back(line["global_step"].get<int64_t>());
        REQUIRE(!steps.empty());
        CHECK(std::is_sorted(steps.begin(), steps.end()));
        CHECK(std::adjacent_find(steps.begin(), steps.end()) == steps.end());
        CHECK(steps.back() == 50);
        const std::string before = s.metrics_before();
        const size_t at_21 = before.find("\"global_step\":21");
        REQUIRE(at_21 != std::string::npos);
        const size_t cut = before.rfind('\n', at_21) + 1;  // the old lines up to step 20, byte for byte
        CHECK(slurp(s.out() + "/metrics.jsonl").compare(0, cut, before, 0, cut) == 0);
    }
    SECTION("every checkpoint damaged: exit 2, metrics untouched") {
        flip_tensor_bit(latest, 0);
        flip_tensor_bit(s.ckpt(20), 1);
        require_exit2_naming(s.train("--set checkpoint.resume=auto"), {"can use none", s.ckpt(20)});
        CHECK(s.metrics_intact());
    }
}

TEST_CASE("truncated files and trailing garbage are refused", "[train][checkpoint][integrity]") {
    const Scene s("length");
    const std::string latest = s.ckpt(40);
    SECTION("trailing garbage") {
        std::ofstream(latest, std::ios::binary | std::ios::app) << "garbage";
        require_exit2_naming(s.eval(latest), {latest, "7 bytes of trailing data"});
    }
    SECTION("truncated in the tensors") {
        fs::resize_file(latest, fs::file_size(latest) - 100);
        require_exit2_naming(s.train("--set checkpoint.resume=" + latest), {latest, "truncated"});
        CHECK(s.metrics_intact());
    }
    SECTION("truncated in the header") {
        fs::resize_file(latest, 30);
        require_exit2_naming(s.eval(latest), {latest, "truncated"});
    }
    SECTION("truncated right after the header, shorter than its largest tensor") {
        // Said "header fails its checksum" before: a tensor larger than what is left was taken for a bad header.
        const CheckpointBytes c = read_checkpoint_bytes(latest);
        fs::resize_file(latest, 16 + c.header_len + 8);
        require_exit2_naming(s.eval(latest), {latest, "checkpoint is truncated (" +
                                                          std::to_string(16 + c.header_len + 8) + " bytes"});
    }
}

TEST_CASE("crafted headers that pass the checksum are exit 2 naming the key", "[train][checkpoint][integrity]") {
    const Scene s("crafted");
    const std::string latest = s.ckpt(40);
    const nlohmann::json good = read_checkpoint_bytes(latest).header;
    auto with = [&](const std::string& key, const nlohmann::json& value) {
        nlohmann::json h = good;
        if (value.is_discarded())
            h.erase(key);
        else
            h[key] = value;
        replace_header(latest, h.dump());
    };
    SECTION("no tensors") {
        with("tensors", nlohmann::json(nlohmann::json::value_t::discarded));
        require_exit2_naming(s.eval(latest), {latest, "'tensors'"});
    }
    SECTION("tensors of the wrong type") {
        with("tensors", "many");
        require_exit2_naming(s.eval(latest), {latest, "'tensors'"});
    }
    SECTION("a tensor entry without a shape") {
        nlohmann::json t = good["tensors"];
        t[1].erase("shape");
        with("tensors", t);
        require_exit2_naming(s.eval(latest), {latest, "tensor entry 1"});
    }
    SECTION("negative global_step") {
        with("global_step", -5);
        require_exit2_naming(s.train("--set checkpoint.resume=" + latest), {latest, "'global_step'"});
    }
    SECTION("global_step as a string") {
        with("global_step", "40");
        require_exit2_naming(s.eval(latest), {latest, "'global_step'"});
    }
    SECTION("step_in_epoch past the epoch") {
        nlohmann::json h = good;
        h["step_in_epoch"] = 61;
        h["global_step"] = 61;
        replace_header(latest, h.dump());
        require_exit2_naming(s.train("--set checkpoint.resume=" + latest), {latest, "step_in_epoch 61 is past"});
    }
    SECTION("global_step inconsistent with the position") {
        with("global_step", 41);
        require_exit2_naming(s.train("--set checkpoint.resume=" + latest), {latest, "global_step 41 disagrees"});
        CHECK(s.metrics_intact());
    }
    SECTION("not JSON") {
        replace_header(latest, "{\"tensors\": [");
        require_exit2_naming(s.eval(latest), {latest, "not valid JSON"});
    }
    SECTION("a format-1 file") {
        CheckpointBytes c = read_checkpoint_bytes(latest);
        c.bytes[7] = '1';
        write_bytes(latest, c.bytes);
        require_exit2_naming(s.eval(latest), {latest, "older ringtrain (checkpoint format 1"});
    }
}

TEST_CASE("latest that is missing, empty or outside the folder falls back to a checkpoint that verifies",
          "[train][checkpoint][integrity]") {
    const Scene s("latest");
    const std::string latest_file = s.out() + "/checkpoints/latest";
    for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
             {"ckpt-000000999.bin\n", "does not exist"},
             {"../../tiny.json\n", "not a checkpoint file of this folder"},
             {"", "latest is empty"}}) {
        SECTION(why) {
            write_file(latest_file, text);
            const auto r = s.train("--set checkpoint.resume=auto --set train.max_steps=45");
            INFO(r.output);
            REQUIRE(r.exit_code == 0);
            CHECK_THAT(r.output, Catch::Contains(why));
            CHECK_THAT(r.output, Catch::Contains("warning: resuming from " + s.ckpt(40) + ", the newest checkpoint that verifies"));
            const auto summary = read_json(s.out() + "/summary.json");
            CHECK(summary["resumed_from"] == s.ckpt(40));
            CHECK(summary["steps_this_run"] == 5);
        }
    }
    SECTION("latest names something outside, and no checkpoint is left: exit 2, nothing written") {
        fs::remove(s.ckpt(20));
        fs::remove(s.ckpt(40));
        write_file(latest_file, "../../../etc/passwd\n");
        require_exit2_naming(s.train("--set checkpoint.resume=auto"), {latest_file, "etc/passwd", "can use none"});
        CHECK(s.metrics_intact());
    }
}

TEST_CASE("a checkpoint of another model is refused naming the first differing tensor", "[train][checkpoint][integrity]") {
    const Scene s("model");
    // The same layers plus one more at the end: every tensor of the checkpoint matches a prefix of this model.
    std::string longer = kTinyCnn;
    longer.replace(longer.rfind("}\n  ]"), 5, "},\n    {\"type\": \"relu\"},\n    {\"type\": \"linear\", \"out_features\": 4}\n  ]");
    write_file(s.dir() + "/longer.json", longer);
    const std::string latest = s.ckpt(40);
    const auto r = run_command(binary() + " eval --config " + s.dir() + "/c.json --set model=" + s.dir() +
                               "/longer.json --checkpoint " + latest);
    require_exit2_naming(r, {latest, "another model", "model tensor 6 is nothing in the checkpoint"});
}

TEST_CASE("a checkpoint with another optimizer's state is refused naming the tensor and the setting",
          "[train][checkpoint][integrity]") {
    const Scene s("optimizer");  // written with SGD, momentum 0.9
    const auto r = s.train("--set checkpoint.resume=auto --set optimizer.momentum=0");
    // The same optimizer: the setting is named, not "another optimizer".
    require_exit2_naming(r, {s.ckpt(40), "optimizer tensor 0 is '", "momentum_buffer", "nothing in this run",
                             "optimizer.momentum", "resume with the settings that wrote it"});
    CHECK(s.metrics_intact());
}

TEST_CASE("a fresh run into a previous run's output.dir is refused; stale temporaries are removed on resume",
          "[train][checkpoint][integrity]") {
    const Scene s("fresh");
    require_exit2_naming(s.train(""), {"output.dir " + s.out() + " holds a previous run", "checkpoint.resume=auto"});
    CHECK(s.metrics_intact());
    CHECK(fs::exists(s.ckpt(20)));
    // Left by a kill or a full disk during a write:
    write_file(s.out() + "/checkpoints/ckpt-000000060.bin.tmp", "half a checkpoint");
    write_file(s.out() + "/checkpoints/latest.tmp", "ckpt-0000");
    const auto r = s.train("--set checkpoint.resume=auto --set train.max_steps=41");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(!fs::exists(s.out() + "/checkpoints/ckpt-000000060.bin.tmp"));
    CHECK(!fs::exists(s.out() + "/checkpoints/latest.tmp"));
}

TEST_CASE("a run resumed at its end keeps the finished run's summary and metrics", "[train][checkpoint][integrity]") {
    const Scene s("finished");
    const std::string summary = slurp(s.out() + "/summary.json");
    REQUIRE(read_json(s.out() + "/summary.json")["test_accuracy"].is_number());
    // A requeued or resubmitted job with the same command (Slurm's --requeue, a crash loop's retry).
    const auto r = s.train("--set checkpoint.resume=auto --set train.max_steps=40");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("nothing left to train: the checkpoint is the end of the run (step 40 of "
                                         "train.max_steps 40)"));
    CHECK(slurp(s.out() + "/summary.json") == summary);
    CHECK(s.metrics_intact());
}

TEST_CASE("an empty metrics.jsonl (a run that failed before its first step) does not block a fresh run",
          "[train][checkpoint][integrity]") {
    const std::string dir = temp_dir("integrity-empty-metrics");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out", kCheckpointing));
    fs::create_directories(dir + "/out/checkpoints");  // what a run that failed on bad input at once leaves
    write_file(dir + "/out/metrics.jsonl", "");
    const auto r = run_command(binary() + " train --config " + dir + "/c.json --set train.max_steps=2");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    // One logged line is a previous run: refused as before.
    const auto again = run_command(binary() + " train --config " + dir + "/c.json --set train.max_steps=2");
    require_exit2_naming(again, {"holds a previous run"});
    // So is a summary.json alone (metrics.jsonl removed, or another tool's file): it would be overwritten.
    fs::remove_all(dir + "/out");
    fs::create_directories(dir + "/out");
    write_file(dir + "/out/summary.json", "precious\n");
    const auto summary_only = run_command(binary() + " train --config " + dir + "/c.json --set train.max_steps=2");
    require_exit2_naming(summary_only, {"holds a previous run"});
    CHECK(slurp(dir + "/out/summary.json") == "precious\n");
}

TEST_CASE("a checkpoint of another world size is refused naming both sizes", "[train][checkpoint][integrity][mpi]") {
    const std::string dir = temp_dir("integrity-world");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out", kCheckpointing));
    auto r = run_command(mpirun(2) + binary() + " train --config " + dir + "/c.json --set train.max_steps=20");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::string before = slurp(dir + "/out/metrics.jsonl");
    r = run_command(binary() + " train --config " + dir + "/c.json --set checkpoint.resume=auto");
    require_exit2_naming(r, {"ckpt-000000020.bin", "written by a 2-rank run, this run has 1", "mpirun -np 2"});
    r = run_command(mpirun(3) + binary() + " train --config " + dir + "/c.json --set checkpoint.resume=auto");
    require_exit2_naming(r, {"written by a 2-rank run, this run has 3"});
    CHECK(slurp(dir + "/out/metrics.jsonl") == before);
    // eval at 2 ranks of a file that is no checkpoint: every rank says so and leaves with 2, no MPI_Abort.
    write_file(dir + "/garbage.bin", "not a checkpoint");
    r = run_command(mpirun(2) + binary() + " eval --config " + dir + "/c.json --checkpoint " + dir + "/garbage.bin");
    require_exit2_naming(r, {"rank 0: " + dir + "/garbage.bin: not a ringtrain checkpoint",
                             "rank 1: " + dir + "/garbage.bin: not a ringtrain checkpoint"});
    CHECK(r.output.find("MPI_ABORT") == std::string::npos);
}

TEST_CASE("a resume from an older checkpoint sets the later ones aside: keep and resume=auto stay on this run",
          "[train][checkpoint][integrity]") {
    // The later checkpoints belonged to the run this one left: kept, checkpoint.keep deleted this run's own before
    // them, and a resume=auto after a damaged newest one jumped onto them, ahead of the step it lost.
    const Scene s("rollback");
    const auto r = s.train("--set checkpoint.resume=" + s.ckpt(20) +
                           " --set train.max_steps=35 --set checkpoint.every_steps=5 --set checkpoint.keep=2");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("resumed at step 20;") && Catch::Contains("ckpt-000000040.bin") &&
                             Catch::Contains("renamed to *.abandoned"));
    CHECK_FALSE(fs::exists(s.ckpt(40)));
    CHECK(fs::exists(s.ckpt(40) + ".abandoned"));  // nothing deleted
    CHECK(fs::exists(s.ckpt(35)));
    CHECK(fs::exists(s.ckpt(30)));  // keep 2: this run's newest two
    CHECK_FALSE(fs::exists(s.ckpt(25)));
    std::ifstream latest(s.out() + "/checkpoints/latest");
    std::string named;
    std::getline(latest, named);
    CHECK(named == "ckpt-000000035.bin");
    // Twice more from step 30: step 35 is set aside each time, next to the earlier one, never over it.
    for (int again = 0; again < 2; ++again) {
        const auto r2 = s.train("--set checkpoint.resume=" + s.ckpt(30) +
                                " --set train.max_steps=35 --set checkpoint.every_steps=5 --set checkpoint.keep=2");
        INFO(r2.output);
        REQUIRE(r2.exit_code == 0);
    }
    CHECK(fs::exists(s.ckpt(35) + ".abandoned"));
    CHECK(fs::exists(s.ckpt(35) + ".abandoned-2"));
    CHECK(fs::exists(s.ckpt(40) + ".abandoned"));
}
