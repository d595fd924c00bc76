#include "ringtrain/cli/cli.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/launch_env.hpp"
#include "ringtrain/comm/ring_communicator.hpp"
#include "ringtrain/comm/world.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/cpu_conv.hpp"
#include "ringtrain/ops/threads.hpp"
#include "ringtrain/train/config.hpp"
#include "ringtrain/train/device_choice.hpp"
#include "ringtrain/train/sparse_trainer.hpp"
#include "ringtrain/train/stalled_learning.hpp"
#include "ringtrain/train/stop_request.hpp"
#include "ringtrain/train/run_prediction.hpp"
#include "ringtrain/train/time_split.hpp"
#include "ringtrain/train/trainer.hpp"
#include "make_clicklog.hpp"
#include "make_image_folder.hpp"
#include "predict_command.hpp"

namespace ringtrain::cli {

namespace {

const char* kUsage = R"(ringtrain - data-parallel training with ring allreduce (one process per rank)

Usage:
  ringtrain train --config FILE [--set key=value]... [--timeline TRACE.json]
  ringtrain eval  --config FILE --checkpoint CKPT [--set key=value]...
  ringtrain info  [--config FILE] [--set key=value]...
  ringtrain make-clicklog --format criteo|libsvm --rows N --out FILE[.gz] [--seed S] [--truth FILE.json] (--help)
  ringtrain make-image-folder --out DIR [--classes 2] [--per-class N] [--size HxW] [--format jpg|png|mixed] (--help)
  ringtrain predict --config FILE [--ranks 2,4,..] [--link 10gbit,5us (default) | --measure] [--json FILE] [--straggler 0.05]
                    [--algorithm auto|ring|recursive_doubling|halving_doubling] [--steps K] [--profile PREDICT.json] (--help)
  ringtrain --help | --help-config | --version

Examples:
  ringtrain train --config configs/lenet5_fashion.json
  mpirun -np 4 ringtrain train --config configs/mnist_cnn_fashion.json --set train.epochs=2
  srun --mpi=pmix ringtrain train --config configs/logreg_fashion.json --set sync.backend=mpi
  ringtrain train --config configs/lenet5_fashion.json --set checkpoint.resume=auto
  mpirun -np 2 ringtrain train --config configs/mnist_cnn_fashion.json --set sync.compression=fp16 --timeline trace.json
  ringtrain eval --config configs/lenet5_fashion.json --checkpoint runs/lenet5_fashion/checkpoints/ckpt-000001874.bin
  mpirun -np 2 ringtrain train --config configs/sparse_logreg_criteo.json --set data.train_file=train.txt

data.format libsvm or criteo trains a sparse_linear model on sparse gradients (see docs/sparse-training.md).
train.batch_size is per rank: N ranks train with a global batch of N x batch_size, and the learning rate is
scaled by optimizer.lr_scaling (linear by default: lr x N, with optional warmup).
Exit codes: 0 success, 2 bad input (config, data, arguments), 1 any other failure,
3 stopped early by SIGTERM, SIGINT or train.stop_signal with a checkpoint written (resume with
checkpoint.resume=auto), 4 ended at once by a second signal or after train.stop_grace_s (no new checkpoint).
)";

struct Args {
    std::string command;
    std::string config;
    std::string checkpoint;
    std::vector<std::string> overrides;
};

// The flags each command takes. Any other is refused by name: `train --checkpoint X` used to be ignored and
// start a fresh run. Commands missing here (--help, unknown ones) are judged before their flags matter.
const std::map<std::string, std::set<std::string>>& command_flags() {
    static const std::map<std::string, std::set<std::string>> flags = {
        {"train", {"--config", "--set", "--timeline"}},
        {"eval", {"--config", "--checkpoint", "--set"}},
        {"info", {"--config", "--set"}},
        {"--help-config", {}},  // it lists every key; a --config given to it was ignored without a word
        {"--version", {}},
    };
    return flags;
}

// eval scores --checkpoint on the config's test data and writes nothing but its result line: a --set of a key that
// asks for a file (a timeline, TensorBoard events) or for another checkpoint would be accepted and ignored. Other keys
// only training reads pass, as they do in the config file: a training command line, with train turned into eval,
// still works.
void refuse_training_only_sets(const std::vector<std::string>& overrides) {
    static const char* const training_only[] = {"output.timeline", "output.tensorboard", "checkpoint.resume",
                                                "checkpoint.every_epochs", "checkpoint.every_steps"};
    for (const std::string& o : overrides) {
        const std::string key = o.substr(0, o.find('='));
        for (const char* t : training_only)
            if (key == t)
                throw InputError("--set " + o + ": `ringtrain eval` does not use " + key +
                                 " (it scores --checkpoint on the config's test data and writes nothing but its "
                                 "result line); remove it");
    }
}

std::string flag_hint(const std::string& command, const std::string& flag) {
    if (command == "train" && flag == "--checkpoint")
        return "to continue from a checkpoint, use --set checkpoint.resume=PATH (or auto)";
    if (command == "--help-config") return "it lists every key; `ringtrain info --config FILE` shows a config's values";
    return "try `ringtrain --help`";
}

Args parse(int argc, char** argv) {
    Args a;
    std::vector<std::string> v(argv + 1, argv + argc);
    if (v.empty()) throw InputError("no command given; try `ringtrain --help`");
    size_t i = 0;
    a.command = v[i++];
    const auto takes = command_flags().find(a.command);
    bool config_given = false, checkpoint_given = false;
    while (i < v.size()) {
        const std::string arg = v[i++];
        if (arg == "--help" || arg == "-h") {  // `ringtrain train --help`: the usage, as make-clicklog --help does
            a.command = "--help";
            return a;
        }
        std::string flag = arg == "-c" ? "--config" : arg;
        std::optional<std::string> value;
        if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = flag.substr(eq + 1);
            flag.resize(eq);
        }
        if (flag != "--config" && flag != "--checkpoint" && flag != "--set" && flag != "--timeline")
            throw InputError("unknown argument '" + arg + "'; try `ringtrain --help`");
        if (takes != command_flags().end() && !takes->second.count(flag))
            throw InputError(flag + ": `ringtrain " + a.command + "` does not take this argument; " +
                             flag_hint(a.command, flag));
        if (!value) {
            if (i >= v.size()) throw InputError(flag + " needs a value; try `ringtrain --help`");
            value = v[i++];
        }
        // An empty name ('--timeline ""' from an unset shell variable) would mean "none" without a word.
        if (value->empty() && flag != "--set")
            throw InputError(flag + " needs a non-empty value (a file name); try `ringtrain --help`");
        // A second --config or --checkpoint would silently replace the first.
        auto set_once = [&](std::string& slot, bool& given, const std::string& advice) {
            if (given) throw InputError(flag + " given twice ('" + slot + "', then '" + *value + "'); " + advice);
            given = true;
            slot = *value;
        };
        if (flag == "--config") {
            set_once(a.config, config_given, "pass one config file and change single keys with --set");
        } else if (flag == "--checkpoint") {
            set_once(a.checkpoint, checkpoint_given, "pass one checkpoint");
        } else if (flag == "--set") {
            a.overrides.push_back(*value);
        } else {
            a.overrides.push_back("output.timeline=" + *value);
        }
    }
    if (a.command == "eval") refuse_training_only_sets(a.overrides);
    // Without a config there is nothing to apply --set to (info reports the defaults): refused, never dropped.
    if (a.command == "info" && a.config.empty() && !a.overrides.empty())
        throw InputError("--set " + a.overrides.front() + ": `ringtrain info` applies --set to a config; pass --config "
                         "FILE with it, or leave --set out for the defaults");
    return a;
}

// The config keys this command ignores (a file's key that a --set left unread), on rank 0's stderr.
void print_notes(const train::Config& cfg, const comm::Communicator& comm) {
    if (comm.rank() == 0)
        for (const std::string& n : cfg.notes()) std::fprintf(stderr, "ringtrain: note: %s\n", n.c_str());
}

int command_train(const std::optional<train::Config>& config, comm::Communicator& comm) {
    if (!config) throw InputError("train needs --config FILE");
    const train::Config& cfg = *config;
    // This process exits when the run returns: a second stop signal meanwhile still ends it with exit 4 and a line.
    // The trainer is built (set-up agreed) before the config's notes: a run refused at set-up prints its one line.
    const auto train_then_exit = [&](auto&& trainer) {
        print_notes(cfg, comm);
        trainer.set_process_exits_after_train(true);
        return trainer.train();
    };
    const auto summary = train::uses_sparse_path(cfg, comm) ? train_then_exit(train::SparseTrainer(cfg, comm))
                                                            : train_then_exit(train::Trainer(cfg, comm));
    if (summary.contains("stopped") && !summary["stopped"].is_null()) {
        // Stopped early by a signal, with a checkpoint: the one line says what happened and how to go on.
        // SIGTERM under a launcher is most often its own teardown (Ctrl-C to mpirun, a cancelled job), after which
        // the launcher reports its own code: the checkpoint is what counts.
        const std::string stopped = summary["stopped"].get<std::string>();
        const bool by_term = stopped.rfind("signal SIGTERM", 0) == 0 && comm.size() > 1;
        if (comm.rank() == 0)
            std::fprintf(stderr,
                         "ringtrain: stopped by %s; checkpoint in %s; continue with --set checkpoint.resume=auto "
                         "(exit %d%s)\n",
                         stopped.c_str(), cfg.plan().output.checkpoint_dir().c_str(), train::kStoppedExitCode,
                         by_term ? "; a launcher that sent SIGTERM, as mpirun does on Ctrl-C, reports its own code" : "");
        return train::kStoppedExitCode;
    }
    if (comm.rank() == 0) {
        const nlohmann::json& accuracy = summary["test_accuracy"];
        char acc[32];
        std::snprintf(acc, sizeof acc, "%.4f", accuracy.is_number() ? accuracy.get<double>() : 0.0);
        std::fprintf(stderr, "done: %lld steps, test accuracy %s, %.1f samples/s, summary in %s/summary.json\n",
                     static_cast<long long>(summary["steps"].get<int64_t>()), accuracy.is_number() ? acc : "none",
                     summary["samples_per_s"].get<double>(), cfg.plan().output.dir.c_str());
        const std::string split = train::describe_time_split(summary);
        if (!split.empty()) std::fprintf(stderr, "%s\n", split.c_str());
        const std::string predicted = train::describe_run_prediction(summary);
        if (!predicted.empty()) std::fprintf(stderr, "%s\n", predicted.c_str());
        const std::string stalled = train::describe_stalled_learning(summary);
        if (!stalled.empty()) std::fprintf(stderr, "%s\n", stalled.c_str());
    }
    return 0;
}

int command_eval(const Args& a, const std::optional<train::Config>& config, comm::Communicator& comm) {
    if (!config || a.checkpoint.empty()) throw InputError("eval needs --config FILE and --checkpoint CKPT");
    const train::Config& cfg = *config;
    const auto result = train::uses_sparse_path(cfg, comm)
                             ? train::SparseTrainer(cfg, comm).evaluate_checkpoint(a.checkpoint)
                             : train::Trainer(cfg, comm, train::TrainerUse::Evaluate).evaluate_checkpoint(a.checkpoint);
    print_notes(cfg, comm);
    if (comm.rank() == 0) std::cout << result.dump() << std::endl;
    return 0;
}

int command_info(const std::optional<train::Config>& config, comm::Communicator& comm) {
    const auto env = comm::describe_launch_environment();
    // Each rank names the device it would train on (the config's choice, else the schema's default, auto).
    const train::DeviceChoice choice = config ? config->plan().device : train::DeviceChoice::Auto;
    if (config) {  // so that "cpu conv:" and "cpu precision:" below are the run's
        ops::set_cpu_conv(config->plan().train.cpu_conv);
        ops::set_cpu_precision(config->plan().train.cpu_precision);
    }
    const auto devices = allgather_strings(comm, train::describe_device(choice, comm.local_rank()));
    if (comm.rank() == 0) {
        std::string backends;
        for (const auto& b : comm::communicator_backends()) backends += (backends.empty() ? "" : ", ") + b;
        std::printf("ringtrain " RINGTRAIN_VERSION ": %d rank(s) on %d host(s), launcher %s, MPI thread level %d, backend %s\n",
                    env.world_size, env.node_count, env.launcher.c_str(), env.thread_level, comm.backend().c_str());
        for (const auto& r : env.ranks)
            std::printf("  rank %d: host %s (node %d), local rank %d of %d, device %s\n", r.rank, r.hostname.c_str(),
                        r.node, r.local_rank, r.local_size, devices.at(static_cast<size_t>(r.rank)).c_str());
        std::printf("backends built: %s\n", backends.c_str());
        if (const auto* ring = dynamic_cast<const comm::RingCommunicator*>(&comm)) {
            if (ring->uses_shared_memory() && comm.size() == 2)
                std::printf("ring transport: shared memory inside this host for messages up to %zu bytes, MPI point-to-point above\n",
                            ring->options().shared_memory_max_bytes);
            else if (ring->uses_shared_memory())
                std::printf("ring transport: shared memory inside this host for every message\n");
            else
                std::printf("ring transport: MPI point-to-point (%s)\n",
                            comm.size() == 1 ? "one rank" : comm.local_size() < comm.size() ? "ranks on several hosts"
                                                                                             : "shared memory off");
        }
        std::printf("cpu gemm: %s\n", ops::cpu_gemm_library().c_str());
        std::printf("cpu conv: %s\n", ops::cpu_conv_description().c_str());
        std::printf("cpu precision: %s\n", ops::cpu_precision_description().c_str());
        std::printf("cpu fusion: %s\n", ops::cpu_fusion_description().c_str());
        if (!env.variables.empty()) {
            std::printf("launcher variables on rank 0:");
            for (const auto& [k, v] : env.variables) std::printf(" %s=%s", k.c_str(), v.c_str());
            std::printf("\n");
        }
        for (const auto& n : env.notes) std::printf("note: %s\n", n.c_str());
        // Where the config's relative paths lead: the model is searched for (docs/run-output.md, "Paths"), data
        // and output paths are taken from the working directory.
        if (config)
            std::printf("model file: %s\nrelative data and output paths from: %s\n", config->model_path().c_str(),
                        std::filesystem::current_path().string().c_str());
    }
    if (config) print_notes(*config, comm);
    if (config && comm.rank() == 0) std::cout << config->document().dump(2) << std::endl;
    return 0;
}

int exit_code_for(const std::exception& e) {
    if (auto* p = dynamic_cast<const PeerFailure*>(&e)) return p->exit_code();
    if (dynamic_cast<const InputError*>(&e)) return 2;
    return 1;
}

}  // namespace

// The command word as a number, for the ranks' agreement on it (0: none given).
int command_id(int argc, char** argv) {
    if (argc < 2) return 0;
    const std::string w = argv[1];
    const char* const words[] = {"train", "eval", "info", "predict", "make-clicklog", "make-image-folder",
                                 "--help", "-h", "help", "--help-config", "--version"};
    for (size_t i = 0; i < std::size(words); ++i)
        if (w == words[i]) return static_cast<int>(i) + 1;
    return static_cast<int>(std::size(words)) + 1;  // unknown: refused alike on every rank
}

int run(int argc, char** argv, int world_rank, int world_size) {
    // Under mpirun every rank must take the same road: a rank running another command (or --help) than the others
    // would leave them waiting in their first collective for ever. Two small allreduces, every rank, every command.
    if (world_size > 1) {
        const int id = command_id(argc, argv);
        if (comm::max_over_world(id) != -comm::max_over_world(-id)) {
            std::fprintf(stderr, "ringtrain: error: rank %d: the ranks were given different commands (this one: '%s'); "
                         "give every rank the same command\n", world_rank, argc > 1 ? argv[1] : "");
            return 2;
        }
    }
    if (argc > 1 && std::string(argv[1]) == "make-clicklog") return run_make_clicklog(argc, argv, world_size);
    if (argc > 1 && std::string(argv[1]) == "make-image-folder") return run_make_image_folder(argc, argv, world_size);
    if (argc > 1 && std::string(argv[1]) == "predict") return run_predict(argc, argv, world_rank, world_size);
    Args args;
    try {
        args = parse(argc, argv);
    } catch (const InputError& e) {
        if (world_size == 1) {
            std::fprintf(stderr, "ringtrain: error: %s\n", e.what());
            return 2;
        }
        // Only this rank's arguments may be wrong: say so here, and join the others' set-up agreement (below), where
        // they wait, so that every rank leaves with exit 2.
        std::fprintf(stderr, "ringtrain: error: rank %d: %s\n", world_rank, e.what());
        std::fflush(stderr);
        const int id = command_id(argc, argv);  // the same on every rank (agreed above)
        if (id >= 1 && id <= 3) comm::max_over_world(2);  // train, eval, info: the others reach their set-up agreement
        return 2;
    }
    if (args.command == "--help" || args.command == "-h" || args.command == "help") {
        std::fputs(kUsage, stdout);
        return 0;
    }
    if (args.command == "--help-config") {
        std::printf("Config keys (JSON sections; override any with --set key=value):\n%s",
                    train::Config::schema_help().c_str());
        return 0;
    }
    if (args.command == "--version") {
        std::printf("ringtrain " RINGTRAIN_VERSION "\n");
        return 0;
    }
    if (args.command != "train" && args.command != "eval" && args.command != "info") {
        if (world_rank == 0)
            std::fprintf(stderr, "ringtrain: error: unknown command '%s'; use train, eval, info, predict, make-clicklog or make-image-folder (see --help)\n",
                     args.command.c_str());
        return 2;
    }

    std::unique_ptr<comm::Communicator> comm;
    int rank = world_rank, world = world_size;
    std::optional<train::Config> config;
    auto report = [&](const std::exception& e) {
        // A check outside the config names its key alone ("sync.backend: nccl needs ..."): say where the value came
        // from, as the config's own checks do.
        const std::string what = config ? config->with_origin(e.what()) : std::string(e.what());
        if (world > 1)
            std::fprintf(stderr, "ringtrain: error: rank %d: %s\n", rank, what.c_str());
        else
            std::fprintf(stderr, "ringtrain: error: %s\n", what.c_str());
        std::fflush(stderr);
    };

    // Read the config, then agree over the whole job before the first collective: a rank that failed here
    // (say its copy of the config is broken) must not leave the others waiting in their first collective.
    int setup_code = 0;
    // Read once here: the backend is needed to open the communicator, and the commands use the same Config.
    train::Backend backend = train::Backend::Ring;  // without a config: the schema's default
    try {
        // The commands' own argument checks too: every rank fails them alike, before a communicator exists, so the
        // job ends with one line a rank and no MPI_Abort.
        if (args.command == "train" && args.config.empty()) throw InputError("train needs --config FILE");
        if (args.command == "eval" && (args.config.empty() || args.checkpoint.empty()))
            throw InputError("eval needs --config FILE and --checkpoint CKPT");
        if (!args.config.empty()) {
            config = train::Config::load(args.config, args.overrides);
            backend = config->plan().sync.backend;
        }
    } catch (const std::exception& e) {
        report(e);
        setup_code = exit_code_for(e);
    }
    const int worst = comm::max_over_world(setup_code);
    if (worst != 0) {
        // Every rank says why it ends (the rule: a message on every rank), the failing ones above.
        if (setup_code == 0)
            std::fprintf(stderr, "ringtrain: rank %d: stopping: another rank failed during set-up (its message says why)\n",
                         rank);
        return worst;
    }

    try {
        comm = comm::make_communicator(train::to_string(backend));
        if (args.command == "train") return command_train(config, *comm);
        if (args.command == "eval") return command_eval(args, config, *comm);
        return command_info(config, *comm);
    } catch (const PeerFailure& e) {
        // This rank is fine; the failing rank printed the reason. Each rank says why it ends, with its exit code.
        std::fprintf(stderr, "ringtrain: rank %d: stopping: %s\n", rank, e.what());
        return e.exit_code();
    } catch (const std::exception& e) {
        const int code = exit_code_for(e);
        const bool together = dynamic_cast<const CollectiveInputError*>(&e) != nullptr ||
                              dynamic_cast<const CollectiveError*>(&e) != nullptr;
        report(e);
        // Collective errors are raised on every rank at once, so a normal exit is safe. Otherwise the
        // other ranks may be waiting in a collective (and MPI_Finalize would wait for them): abort the job
        // (the one line above says why; the others get the launcher's SIGTERM, see StopRequest::watch).
        if (together || world == 1) return code;
        // No communicator yet: opening it failed on this rank (a ring's shared memory, NCCL's set-up on one GPU),
        // while the others may be inside it, waiting.
        if (!comm) comm::abort_world(code);
        comm->abort("", code);
    }
    return 1;
}

}  // namespace ringtrain::cli
