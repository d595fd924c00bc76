// started_by_a_launcher and prefer_fast_singleton_start: which environments count as launched, and that the singleton
// defaults never override a user's own MCA settings or apply under a launcher. Only the environment is touched here;
// every single-process run of the binary in the suite (help, info, the bad-input corpus) goes through the real start.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "ringtrain/comm/mpi_runtime.hpp"

using namespace ringtrain::comm;

namespace {

const char* const kLaunchVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD",
                                         "SLURM_STEP_ID"};
const char* const kDefaults[] = {"OMPI_MCA_ess_singleton_isolated", "OMPI_MCA_pml"};

// Saves the variables a case touches, clears them, and puts them back afterwards (ctest may itself run under srun).
class ScopedEnvironment {
public:
    ScopedEnvironment() {
        for (const char* n : kLaunchVariables) save(n);
        for (const char* n : kDefaults) save(n);
        save("SLURM_JOB_ID");
    }
    ~ScopedEnvironment() {
        for (const auto& [name, value] : saved_)
            if (value) setenv(name.c_str(), value->c_str(), 1);
            else unsetenv(name.c_str());
    }

private:
    void save(const char* name) {
        const char* v = std::getenv(name);
        saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
        unsetenv(name);
    }
    std::map<std::string, std::optional<std::string>> saved_;
};

std::string env_or_unset(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "<unset>";
}

}  // namespace

TEST_CASE("a launcher is recognised by any of its variables; a batch script's own shell is not one", "[comm][singleton]") {
    ScopedEnvironment scope;
    CHECK_FALSE(started_by_a_launcher());
    setenv("SLURM_JOB_ID", "42", 1);  // inside sbatch, started without srun
    CHECK_FALSE(started_by_a_launcher());
    for (const char* name : kLaunchVariables) {
        INFO(name);
        setenv(name, "0", 1);
        CHECK(started_by_a_launcher());
        unsetenv(name);
    }
    CHECK_FALSE(started_by_a_launcher());
}

TEST_CASE("the singleton defaults apply without a launcher, keep the user's values, and never apply under one",
          "[comm][singleton]") {
    ScopedEnvironment scope;
    SECTION("no launcher: both defaults") {
        prefer_fast_singleton_start();
        CHECK(env_or_unset("OMPI_MCA_ess_singleton_isolated") == "1");
        CHECK(env_or_unset("OMPI_MCA_pml") == "ob1");
    }
    SECTION("no launcher, the user chose a PML: theirs stays") {
        setenv("OMPI_MCA_pml", "ucx", 1);
        prefer_fast_singleton_start();
        CHECK(env_or_unset("OMPI_MCA_pml") == "ucx");
        CHECK(env_or_unset("OMPI_MCA_ess_singleton_isolated") == "1");
    }
    SECTION("under mpirun or srun: nothing set") {
        setenv(GENERATE(as<std::string>{}, "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "SLURM_STEP_ID").c_str(), "2", 1);
        prefer_fast_singleton_start();
        CHECK(env_or_unset("OMPI_MCA_ess_singleton_isolated") == "<unset>");
        CHECK(env_or_unset("OMPI_MCA_pml") == "<unset>");
    }
}
