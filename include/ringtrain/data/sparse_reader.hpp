// The sparse (click-log) input path: libsvm and Criteo-layout text files, plain or .gz, read streaming — each rank
// its own contiguous share of the training file's lines, in a bounded buffer, parsed on a separate thread into
// CsrBatch batches — so memory stays bounded whatever the file size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ringtrain/core/csr_batch.hpp"

namespace ringtrain::data {

enum class SparseFormat { Libsvm, Criteo };
enum class CriteoIntegers { Log2, Hash };

struct SparseReaderOptions {
    SparseFormat format = SparseFormat::Libsvm;
    std::string file;               // data.train_file or data.test_file
    int index_base = 1;             // libsvm: 1 (as libsvm) or 0
    int64_t num_features = 0;       // feature space; libsvm indices at or past it are an error naming file:line
    int hash_bits = 20;             // criteo: (column, value) pairs hash into 2^hash_bits features
    CriteoIntegers criteo_integers = CriteoIntegers::Log2;
    int64_t shuffle_buffer = 0;     // rows shuffled in memory (0 = file order)
    bool cache = false;             // keep this rank's parsed share in memory after the first pass
    int64_t buffer_bytes = 8 << 20; // bounded read-ahead of raw text
    uint64_t seed = 0;              // shuffle seed (combine with rank and epoch)
    int rank = 0, world = 1;        // this rank's share of the file's lines
};

// One rank's stream of batches over its share of one file, epoch after epoch.
class SparseBatchReader {
public:
    virtual ~SparseBatchReader() = default;
    // Starts epoch `epoch` (reshuffles with seed, rank and epoch); the first call is epoch 0.
    virtual void start_epoch(int64_t epoch) = 0;
    // Fills `out` with up to `rows` rows; false (and `out` empty) when this rank's share is used up.
    virtual bool next(CsrBatch& out, int64_t rows) = 0;
    virtual int64_t num_features() const = 0;
    virtual std::string description() const = 0;
};

std::unique_ptr<SparseBatchReader> open_sparse_reader(const SparseReaderOptions& options);

}  // namespace ringtrain::data
