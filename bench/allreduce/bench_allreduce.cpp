// bench_allreduce: allreduce time, algbw and busbw per message size, like nccl-tests' all_reduce_perf.
//
//   mpirun -np N bench_allreduce [--min-bytes 4K] [--max-bytes 256M] [--step 4] [--iters K] [--warmup W]
//                                [--backend ring|mpi|both|all] [--threshold BYTES] [--chunk BYTES] [--depth D] [--halving-max BYTES]
//                                [--shm-max BYTES] [--shm-chunk BYTES] [--json FILE]
//
// Backends: "ring" is what sync.backend ring trains with (shared memory when every rank is on one node, else MPI
// point-to-point); "p2p" is the same ring communicator with shared memory off (the ring / recursive doubling /
// halving paths over MPI messages); "mpi" is MPI_Allreduce. both = ring + mpi, all = ring + p2p + mpi.
//
// Per size S: time = mean over `iters` timed calls, max over ranks (µs), measured in `trials` rounds that alternate
// between the backends; the reported time is the median round (the VM is shared: the median drops rounds hit by
// other tenants without picking the luckiest one). algbw = S/time; busbw = algbw·2(N−1)/N (decimal GB/s). `ok` checks one extra call per size against a serial reference: rank k's input is
// x_k[i] = (h(k,i) mod 2^12 − 2^11)/2^8, small multiples of 2^−8, so every partial sum is exact in float and the
// result must equal the reference bit for bit, whatever the summation order.
// Sizes go outer and backends inner, so both backends see the same machine load at each size.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/mpi_communicator.hpp"
#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/comm/ring_communicator.hpp"
#include "ringtrain/core/error.hpp"

using namespace ringtrain;
using namespace ringtrain::comm;

namespace {

struct Options {
    size_t min_bytes = 4 << 10;
    size_t max_bytes = 256 << 20;
    size_t step = 4;
    int iters = 0;   // 0: automatic (more for small sizes)
    int warmup = 0;  // 0: automatic
    int trials = 5;
    std::string backend = "both";
    std::string json;
    RingOptions ring = ring_backend_defaults();
};

size_t parse_bytes(const std::string& s) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || v < 0) throw InputError("not a size: '" + s + "' (e.g. 4096, 64K, 16M, 1G)");
    double mult = 1;
    switch (*end) {
        case 'k': case 'K': mult = 1024; break;
        case 'm': case 'M': mult = 1024.0 * 1024; break;
        case 'g': case 'G': mult = 1024.0 * 1024 * 1024; break;
        case '\0': break;
        default: throw InputError("not a size: '" + s + "'");
    }
    return static_cast<size_t>(v * mult);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) throw InputError(a + " needs a value");
            return argv[++i];
        };
        if (a == "--min-bytes" || a == "-b") o.min_bytes = parse_bytes(next());
        else if (a == "--max-bytes" || a == "-e") o.max_bytes = parse_bytes(next());
        else if (a == "--step" || a == "-f") o.step = std::max<size_t>(2, std::stoul(next()));
        else if (a == "--iters" || a == "-n") o.iters = std::stoi(next());
        else if (a == "--warmup" || a == "-w") o.warmup = std::stoi(next());
        else if (a == "--trials") o.trials = std::max(1, std::stoi(next()));
        else if (a == "--backend") o.backend = next();
        else if (a == "--json") o.json = next();
        else if (a == "--threshold") o.ring.small_message_bytes = parse_bytes(next());
        else if (a == "--chunk") o.ring.chunk_bytes = parse_bytes(next());
        else if (a == "--depth") o.ring.pipeline_depth = std::stoi(next());
        else if (a == "--halving-max") o.ring.halving_max_bytes = parse_bytes(next());
        else if (a == "--shm-max") o.ring.shared_memory_max_bytes = parse_bytes(next());
        else if (a == "--shm-chunk") o.ring.shared_memory_chunk_bytes = parse_bytes(next());
        else if (a == "--help" || a == "-h") {
            std::printf("usage: bench_allreduce [--min-bytes 4K] [--max-bytes 256M] [--step 4] [--iters K] [--warmup W] [--trials T]\n"
                        "                       [--backend ring|p2p|mpi|both|all] [--threshold BYTES] [--chunk BYTES] [--depth D]\n"
                        "                       [--halving-max BYTES] [--shm-max BYTES] [--shm-chunk BYTES]\n"
                        "                       [--json FILE]\n");
            std::exit(0);
        } else throw InputError("unknown option '" + a + "' (see --help)");
    }
    if (o.backend != "ring" && o.backend != "p2p" && o.backend != "mpi" && o.backend != "both" && o.backend != "all")
        throw InputError("--backend must be ring, p2p, mpi, both or all, not '" + o.backend + "'");
    if (o.min_bytes < sizeof(float) || o.max_bytes < o.min_bytes) throw InputError("need 4 <= --min-bytes <= --max-bytes");
    return o;
}

inline uint32_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return static_cast<uint32_t>(x);
}
inline float input_value(int rank, size_t i) {
    return static_cast<float>(static_cast<int>(mix((uint64_t(rank) << 40) ^ i) & 0xfff) - 2048) * (1.0f / 256.0f);
}

void fill_input(float* p, size_t n, int rank) {
    for (size_t i = 0; i < n; ++i) p[i] = input_value(rank, i);
}

bool check_result(const float* p, size_t n, int size) {
    for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int k = 0; k < size; ++k) want += input_value(k, i);
        if (p[i] != want) return false;
    }
    return true;
}

struct Row {
    std::string backend;
    int ranks;
    size_t bytes;
    double time_us, algbw, busbw;
    bool ok;
};

}  // namespace

int main(int argc, char** argv) {
    try {
        MpiRuntime mpi(&argc, &argv);
        const Options opt = parse(argc, argv);
        const int rank = mpi.world_rank(), size = mpi.world_size();

        std::vector<std::pair<std::string, std::unique_ptr<Communicator>>> comms;
        const auto wanted = [&](const char* name) {
            return opt.backend == name || opt.backend == "all" || (opt.backend == "both" && std::string(name) != "p2p");
        };
        if (wanted("ring")) comms.emplace_back("ring", std::make_unique<RingCommunicator>(opt.ring));
        if (wanted("p2p")) {
            RingOptions p2p = opt.ring;
            p2p.shared_memory_max_bytes = 0;
            comms.emplace_back("p2p", std::make_unique<RingCommunicator>(p2p));
        }
        if (wanted("mpi")) comms.emplace_back("mpi", std::make_unique<MpiCommunicator>());

        const size_t max_count = opt.max_bytes / sizeof(float);
        float* buf = static_cast<float*>(std::aligned_alloc(64, (max_count * sizeof(float) + 63) / 64 * 64));
        if (!buf) throw Error("cannot allocate " + std::to_string(opt.max_bytes) + " bytes");
        fill_input(buf, max_count, rank);  // touch every page once, before any timing

        if (rank == 0) {
            const auto* ring = comms.empty() ? nullptr : dynamic_cast<const RingCommunicator*>(comms.front().second.get());
            std::printf("# bench_allreduce: %d ranks, backends %s, ring threshold %zu B, chunk %zu B, depth %d, shared memory %s "
                        "(up to %zu B, chunk %zu B), %s\n",
                        size, opt.backend.c_str(), opt.ring.small_message_bytes, opt.ring.chunk_bytes, opt.ring.pipeline_depth,
                        ring && ring->uses_shared_memory() ? "on" : "off", opt.ring.shared_memory_max_bytes,
                        opt.ring.shared_memory_chunk_bytes, thread_level_name(mpi.thread_level()));
            std::printf("# %12s %12s %6s %6s %12s %10s %10s %4s\n", "bytes", "count", "backend", "iters", "time_us",
                        "algbw_GB/s", "busbw_GB/s", "ok");
        }
        std::vector<Row> rows;
        bool all_ok = true;
        for (size_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= opt.step) {
            const size_t count = bytes / sizeof(float);
            const std::span<float> data(buf, count);
            const int iters = opt.iters > 0 ? opt.iters : static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes, 3, 400));
            const int warmup = opt.warmup > 0 ? opt.warmup : std::max(2, iters / 4);
            std::vector<int> ok(comms.size());
            std::vector<std::vector<double>> times(comms.size());
            for (size_t b = 0; b < comms.size(); ++b) {
                Communicator& comm = *comms[b].second;
                // Correctness on fresh input.
                fill_input(buf, count, rank);
                comm.allreduce(data, ReduceOp::Sum);
                ok[b] = check_result(buf, count, size) ? 1 : 0;
                MPI_Allreduce(MPI_IN_PLACE, &ok[b], 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            }
            // Timing: the values keep growing (×N per call) but stay finite or become inf, never denormal.
            fill_input(buf, count, rank);
            for (int trial = 0; trial < opt.trials; ++trial) {
                for (size_t b = 0; b < comms.size(); ++b) {
                    Communicator& comm = *comms[b].second;
                    for (int w = 0; w < (trial == 0 ? warmup : 1); ++w) comm.allreduce(data, ReduceOp::Sum);
                    MPI_Barrier(MPI_COMM_WORLD);
                    const double t0 = MPI_Wtime();
                    for (int it = 0; it < iters; ++it) comm.allreduce(data, ReduceOp::Sum);
                    double t = (MPI_Wtime() - t0) / iters;
                    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                    times[b].push_back(t);
                }
            }
            for (size_t b = 0; b < comms.size(); ++b) {
                const std::string& name = comms[b].first;
                std::vector<double>& ts = times[b];
                std::sort(ts.begin(), ts.end());
                const double t = ts[ts.size() / 2];
                Row row{name, size, count * sizeof(float), t * 1e6, 0, 0, ok[b] == 1};
                row.algbw = static_cast<double>(row.bytes) / t / 1e9;
                row.busbw = row.algbw * 2.0 * (size - 1) / size;
                all_ok = all_ok && row.ok;
                if (rank == 0) {
                    std::printf("  %12zu %12zu %6s %6d %12.1f %10.3f %10.3f %4s\n", row.bytes, count, name.c_str(), iters,
                                row.time_us, row.algbw, row.busbw, row.ok ? "ok" : "FAIL");
                    std::fflush(stdout);
                }
                rows.push_back(row);
            }
            if (bytes > opt.max_bytes / opt.step) break;
        }
        if (rank == 0 && comms.size() == 2) {
            std::printf("\n# ring / mpi: busbw ratio (>1 = ring faster), time ratio (<1 = ring faster)\n");
            std::printf("# %12s %10s %10s\n", "bytes", "busbw", "time");
            for (size_t i = 0; i + 1 < rows.size(); i += 2)
                std::printf("  %12zu %10.2f %10.2f\n", rows[i].bytes, rows[i].busbw / rows[i + 1].busbw,
                            rows[i].time_us / rows[i + 1].time_us);
        }
        if (rank == 0 && !opt.json.empty()) {
            nlohmann::json j = nlohmann::json::array();
            for (const Row& r : rows)
                j.push_back({{"backend", r.backend}, {"ranks", r.ranks}, {"bytes", r.bytes}, {"time_us", r.time_us},
                             {"algbw_gbs", r.algbw}, {"busbw_gbs", r.busbw}, {"ok", r.ok}});
            std::ofstream out(opt.json);
            out << j.dump(2) << "\n";
            if (!out) throw InputError("cannot write " + opt.json);
        }
        std::free(buf);
        comms.clear();
        return all_ok ? 0 : 1;
    } catch (const InputError& e) {
        std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
        return 1;
    }
}
