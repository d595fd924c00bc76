#include "tool_args.hpp"

#include <cstdio>
#include <exception>

namespace ringtrain::cli {

ToolArgs parse_tool_args(const std::string& tool, int argc, char** argv, std::initializer_list<const char*> known,
                         int world_size, const std::string& what) {
    ToolArgs a;
    const std::string see = "; see `ringtrain " + tool + " --help`";
    for (int i = 2; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--help" || flag == "-h") {
            a.help = true;
            return a;
        }
        bool ok = false;
        for (const char* k : known) ok = ok || flag == k;
        if (!ok) throw InputError(tool + ": unknown argument '" + flag + "'" + see);
        if (i + 1 >= argc) throw InputError(tool + ": " + flag + " needs a value");
        if (!a.emplace(flag, argv[++i]).second) throw InputError(tool + ": " + flag + " given twice");
    }
    if (world_size > 1) throw InputError(tool + " writes " + what + ": run it as one process, not under mpirun");
    return a;
}

int run_tool(const std::function<int()>& body, int world_rank) {
    try {
        return body();
    } catch (const CollectiveInputError& e) {
        // Raised on every rank at once (the ranks disagree): each says so, as train does.
        if (world_rank < 0)
            std::fprintf(stderr, "ringtrain: error: %s\n", e.what());
        else
            std::fprintf(stderr, "ringtrain: error: rank %d: %s\n", world_rank, e.what());
        return 2;
    } catch (const InputError& e) {
        if (world_rank <= 0) std::fprintf(stderr, "ringtrain: error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        if (world_rank < 0)
            std::fprintf(stderr, "ringtrain: error: %s\n", e.what());
        else
            std::fprintf(stderr, "ringtrain: error: rank %d: %s\n", world_rank, e.what());
        return 1;
    }
}

}  // namespace ringtrain::cli
