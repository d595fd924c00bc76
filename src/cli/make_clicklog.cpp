#include "make_clicklog.hpp"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "tool_args.hpp"
#include "ringtrain/data/click_log_generator.hpp"

namespace ringtrain::cli {

namespace {

const char* kMakeClicklogUsage = R"(Usage:
  ringtrain make-clicklog --format criteo|libsvm --rows N --out FILE[.gz] [--seed S] [--model-seed M] [--truth FILE.json]
                          [--hash-bits B] [--criteo-integers log2|hash] [--features F]
                          [--bias X] [--weight-scale X] [--zipf X]
Writes N rows drawn from a known logistic model (label ~ Bernoulli(sigmoid(bias + w.x)) on exactly the features
the reader parses); --truth writes the model's description and its log loss on the rows (the target a trained
model approaches). criteo: 40 tab-separated columns, features hashed into 2^B (default 20); libsvm: ids 1..F
(default 1000). --seed draws the rows, --model-seed the true weights: a training and a test file with different
seeds and the same model seed come from the same model. Defaults: seed 1, model seed 1, bias -1.5, weight scale
0.25, Zipf exponent 1.2.
)";

template <class T>
T number(const std::string& flag, const std::string& text) {
    return tool_number<T>("make-clicklog", flag, text);
}

}  // namespace

int run_make_clicklog(int argc, char** argv, int world_size) {
    return run_tool([&] {
        ToolArgs a = parse_tool_args(
            "make-clicklog", argc, argv,
            {"--format", "--rows", "--out", "--seed", "--model-seed", "--truth", "--hash-bits", "--criteo-integers",
             "--features", "--bias", "--weight-scale", "--zipf"},
            world_size, "one file");
        if (a.help) {
            std::fputs(kMakeClicklogUsage, stdout);
            return 0;
        }
        for (const char* required : {"--format", "--rows", "--out"})
            if (!a.count(required))
                throw InputError(std::string("make-clicklog needs ") + required + "; see `ringtrain make-clicklog --help`");
        data::ClickLogSpec spec;
        if (a["--format"] == "criteo")
            spec.format = data::SparseFormat::Criteo;
        else if (a["--format"] == "libsvm")
            spec.format = data::SparseFormat::Libsvm;
        else
            throw InputError("make-clicklog: --format must be criteo or libsvm (got '" + a["--format"] + "')");
        // A flag of the other format would be ignored without a word.
        const bool criteo = spec.format == data::SparseFormat::Criteo;
        for (const char* flag : {"--hash-bits", "--criteo-integers"})
            if (!criteo && a.count(flag))
                throw InputError(std::string("make-clicklog: ") + flag + " is for --format criteo; remove it");
        if (criteo && a.count("--features"))
            throw InputError("make-clicklog: --features is for --format libsvm (criteo hashes into 2^--hash-bits); "
                             "remove it");
        spec.rows = number<int64_t>("--rows", a["--rows"]);
        if (a.count("--seed")) spec.seed = number<uint64_t>("--seed", a["--seed"]);
        if (a.count("--model-seed")) spec.model_seed = number<uint64_t>("--model-seed", a["--model-seed"]);
        if (a.count("--hash-bits")) spec.hash_bits = number<int>("--hash-bits", a["--hash-bits"]);
        if (a.count("--features")) spec.features = number<int64_t>("--features", a["--features"]);
        if (a.count("--bias")) spec.bias = number<double>("--bias", a["--bias"]);
        if (a.count("--weight-scale")) spec.weight_scale = number<double>("--weight-scale", a["--weight-scale"]);
        if (a.count("--zipf")) spec.zipf_exponent = number<double>("--zipf", a["--zipf"]);
        if (a.count("--criteo-integers")) {
            const std::string& v = a["--criteo-integers"];
            if (v != "log2" && v != "hash")
                throw InputError("make-clicklog: --criteo-integers must be log2 or hash (got '" + v + "')");
            spec.criteo_integers = v == "log2" ? data::CriteoIntegers::Log2 : data::CriteoIntegers::Hash;
        }
        // A mistyped --out or --truth must not replace a real click log (or the log itself, named twice): like
        // make-image-folder, only new names are written.
        for (const char* flag : {"--out", "--truth"}) {
            std::error_code ec;
            if (a.count(flag) && std::filesystem::exists(std::filesystem::symlink_status(a[flag], ec)))
                throw InputError(std::string("make-clicklog: ") + flag + " " + a[flag] +
                                 " exists; name a new file (or remove it first)");
        }
        for (const char* flag : {"--out", "--truth"})
            if (a.count(flag) && a[flag].empty())
                throw InputError(std::string("make-clicklog: ") + flag + " needs a file name");
        // The same file by another spelling too (a symlinked folder, ./x): weakly_canonical follows what exists.
        std::error_code same_ec;
        if (a.count("--truth") && std::filesystem::weakly_canonical(std::filesystem::absolute(a["--truth"]), same_ec) ==
                                      std::filesystem::weakly_canonical(std::filesystem::absolute(a["--out"]), same_ec))
            throw InputError("make-clicklog: --truth names the same file as --out; give the truth JSON its own name");
        // Their folders are made (as make-image-folder does, and as the configs' data/criteo/train.txt needs) and
        // checked before the rows are written: a truth file that cannot be written fails now, not after the log.
        // Both checked before either folder is made; a folder that still cannot be made (root may write where mkdir
        // fails, as in /proc) takes back the ones this run made: a refused --truth leaves no --out folder behind.
        std::vector<std::filesystem::path> made;
        for (bool create : {false, true})
            for (const char* flag : {"--out", "--truth"}) {
                if (!a.count(flag)) continue;
                const std::filesystem::path folder = std::filesystem::absolute(a[flag]).parent_path();
                std::filesystem::path existing = folder, top;  // the nearest folder that is there; the first made
                std::error_code ec;
                while (!std::filesystem::exists(existing, ec) && existing.has_parent_path() &&
                       existing != existing.parent_path()) {
                    top = existing;
                    existing = existing.parent_path();
                }
                if (create && std::filesystem::create_directories(folder, ec) && !top.empty()) made.push_back(top);
                const std::filesystem::path judged = create ? folder : existing;
                if (ec || !std::filesystem::is_directory(judged, ec) || ::access(judged.c_str(), W_OK) != 0) {
                    const std::string why = ec ? ec.message() : std::strerror(errno ? errno : ENOTDIR);
                    for (const auto& m : made) std::filesystem::remove_all(m, ec);
                    throw InputError(std::string("make-clicklog: ") + flag + " " + a[flag] + ": cannot write in '" +
                                     folder.string() + "' (" + why + "); name a file in a writable folder");
                }
            }
        const auto t0 = std::chrono::steady_clock::now();
        const data::ClickLogTruth truth = data::generate_click_log(spec, a["--out"]);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (a.count("--truth")) {
            std::ofstream f(a["--truth"]);
            f << truth.to_json().dump(2) << "\n";
            if (!f) throw InputError(a["--truth"] + ": cannot write the truth file");
        }
        std::fprintf(stderr,
                     "make-clicklog: %lld rows to %s in %.2f s; positive rate %.4f, true log loss %.4f "
                     "(constant predictor %.4f)\n",
                     static_cast<long long>(spec.rows), a["--out"].c_str(), secs,
                     static_cast<double>(truth.positives) / static_cast<double>(spec.rows), truth.true_logloss,
                     truth.constant_logloss);
        return 0;
    });
}

}  // namespace ringtrain::cli
