// The streaming sparse reader: rank shares (plain byte ranges and gzip round-robin) that cover every line once,
// true line numbers in errors from any share, bounded memory on a file much larger than the buffer, the seeded
// shuffle, the cache, and the scan behind `num_features: 0`.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/sparse_reader.hpp"
#include "test_sparse_files.hpp"

using namespace ringtrain;
using namespace ringtrain::data;
using Catch::Contains;
using sparse_test::read_epoch;
using sparse_test::TempDir;

namespace {

// `rows` libsvm lines; line i has feature i+1 (so every row is distinct) and a varying tail, with comments, empty
// lines and CRLF mixed in. Returns the text; `data_rows` gets the row count.
std::string libsvm_text(int rows, int64_t& data_rows, bool trailing_newline = true) {
    std::string s;
    data_rows = 0;
    for (int i = 0; i < rows; ++i) {
        if (i % 17 == 3) s += "# a comment line\n";
        if (i % 23 == 5) s += "\n";
        // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on chains of string operator+ here.
        s += std::to_string(i % 2);
        s += ' ';
        s += std::to_string(i + 1);
        s += ":1";
        for (int k = 0; k < i % 9; ++k) {
            s += ' ';
            s += std::to_string(rows + 10 + k * 7);
            s += ":0.25";
        }
        s += (i % 5 == 0) ? "\r\n" : "\n";
        ++data_rows;
    }
    if (!trailing_newline) s.pop_back();
    return s;
}

// The same `rows` libsvm lines as p.svm and p.svm.gz in `dir` (plain and gzip shares); returns the text.
std::string write_plain_and_gz(const TempDir& dir, int rows, int64_t& data_rows) {
    std::string text = libsvm_text(rows, data_rows);
    sparse_test::write_text(dir.file("p.svm"), text);
    sparse_test::write_gz(dir.file("p.svm.gz"), text);
    return text;
}

SparseReaderOptions libsvm_options(const std::string& path, int64_t num_features) {
    SparseReaderOptions o;
    o.format = SparseFormat::Libsvm;
    o.file = path;
    o.num_features = num_features;
    o.buffer_bytes = 16 << 10;  // the smallest buffer: many chunks even in small files
    return o;
}

}  // namespace

TEST_CASE("ranks read disjoint shares that cover every line exactly once (plain and gzip)") {
    TempDir dir;
    int64_t data_rows = 0;
    for (const bool trailing_newline : {true, false}) {
        const std::string text = libsvm_text(3000, data_rows, trailing_newline);
        sparse_test::write_text(dir.file("a.svm"), text);
        sparse_test::write_gz(dir.file("a.svm.gz"), text);
        for (const std::string name : {"a.svm", "a.svm.gz"}) {
            std::vector<std::string> all;
            {
                auto reader = open_sparse_reader(libsvm_options(dir.file(name), 4000));
                all = read_epoch(*reader, 0);
            }
            REQUIRE(static_cast<int64_t>(all.size()) == data_rows);
            for (const int world : {2, 3}) {
                std::multiset<std::string> seen;
                for (int rank = 0; rank < world; ++rank) {
                    auto o = libsvm_options(dir.file(name), 4000);
                    o.rank = rank;
                    o.world = world;
                    auto reader = open_sparse_reader(o);
                    const auto share = read_epoch(*reader, 0, 64);
                    CHECK(share.size() > 0);
                    seen.insert(share.begin(), share.end());
                    const auto scan = scan_sparse_share(o);
                    CHECK(scan.rows == static_cast<int64_t>(share.size()));
                }
                INFO(name << " world " << world << " trailing newline " << trailing_newline);
                CHECK(seen == std::multiset<std::string>(all.begin(), all.end()));
            }
        }
    }
}

TEST_CASE("plain-file shares: contiguous, and tiny files leave some ranks empty") {
    TempDir dir;
    sparse_test::write_text(dir.file("two.svm"), "1 1:1\n0 2:1\n");
    std::vector<std::string> rows;
    for (int rank = 0; rank < 5; ++rank) {
        auto o = libsvm_options(dir.file("two.svm"), 10);
        o.rank = rank;
        o.world = 5;
        auto reader = open_sparse_reader(o);
        for (const auto& r : read_epoch(*reader, 0)) rows.push_back(r);
    }
    CHECK(rows == std::vector<std::string>{"1|0:1 ", "0|1:1 "});  // in file order across ranks
}

TEST_CASE("an error in a later rank's share names the true file line") {
    TempDir dir;
    int64_t data_rows = 0;
    std::string text = libsvm_text(2000, data_rows);
    // Replace the 1800th line of the file with a malformed one.
    size_t pos = 0;
    for (int line = 1; line < 1800; ++line) pos = text.find('\n', pos) + 1;
    text.insert(pos, "1 5:1 3:1\n");
    sparse_test::write_text(dir.file("bad.svm"), text);
    sparse_test::write_gz(dir.file("bad.svm.gz"), text);
    for (const std::string name : {"bad.svm", "bad.svm.gz"}) {
        int raised = 0;
        for (int rank = 0; rank < 3; ++rank) {
            auto o = libsvm_options(dir.file(name), 4000);
            o.rank = rank;
            o.world = 3;
            try {
                auto reader = open_sparse_reader(o);
                read_epoch(*reader, 0);
            } catch (const InputError& e) {
                ++raised;
                CHECK_THAT(e.what(), Contains(dir.file(name) + ":1800: feature index 3 does not increase"));
            }
        }
        CHECK(raised == 1);  // only the rank that owns the line
    }
}

TEST_CASE("memory stays bounded by the buffers on a file much larger than them") {
    TempDir dir;
    int64_t data_rows = 0;
    const std::string text = libsvm_text(60000, data_rows);
    sparse_test::write_text(dir.file("big.svm"), text);
    sparse_test::write_gz(dir.file("big.svm.gz"), text);
    const int64_t buffer = 64 << 10;
    REQUIRE(static_cast<int64_t>(text.size()) > 30 * buffer);
    for (const std::string name : {"big.svm", "big.svm.gz"}) {
        auto o = libsvm_options(dir.file(name), 70000);
        o.buffer_bytes = buffer;
        o.shuffle_buffer = 500;
        auto reader = open_sparse_reader(o);
        CsrBatch b;
        int64_t rows = 0;
        reader->start_epoch(0);
        while (reader->next(b, 256)) rows += b.rows();
        CHECK(rows == data_rows);
        const auto s = reader->stats();
        INFO(name << ": raw " << s.peak_raw_bytes << ", queued " << s.peak_queued_bytes << " bytes / "
                  << s.peak_queued_rows << " rows, shuffle " << s.peak_shuffle_rows);
        CHECK(s.peak_raw_bytes > 0);
        CHECK(s.peak_raw_bytes <= buffer);
        // Queued CSR: kSparseQueueBlocks blocks of at most buffer/kSparseQueueBlocks text each, CSR < 2x text here.
        CHECK(s.peak_queued_bytes <= 2 * buffer);
        CHECK(s.peak_queued_rows < data_rows / 10);
        CHECK(s.peak_shuffle_rows == 500);
        CHECK(s.cached_rows == 0);
        CHECK(s.bytes_parsed == static_cast<int64_t>(text.size()));
    }
}

TEST_CASE("shuffle: seeded by (seed, rank, epoch), a permutation of the share") {
    TempDir dir;
    int64_t data_rows = 0;
    sparse_test::write_text(dir.file("s.svm"), libsvm_text(2000, data_rows));
    auto o = libsvm_options(dir.file("s.svm"), 4000);
    auto plain = open_sparse_reader(o);
    const auto file_order = read_epoch(*plain, 0);
    o.shuffle_buffer = 300;
    o.seed = 42;
    auto a = open_sparse_reader(o);
    auto b = open_sparse_reader(o);
    const auto a0 = read_epoch(*a, 0), b0 = read_epoch(*b, 0), a1 = read_epoch(*a, 1);
    CHECK(a0 == b0);
    CHECK(a0 != file_order);
    CHECK(a1 != a0);
    CHECK(std::multiset<std::string>(a0.begin(), a0.end()) ==
          std::multiset<std::string>(file_order.begin(), file_order.end()));
    CHECK(std::multiset<std::string>(a1.begin(), a1.end()) ==
          std::multiset<std::string>(file_order.begin(), file_order.end()));
    CHECK(read_epoch(*b, 1) == a1);  // epoch 1 does not depend on what came before
    o.seed = 43;
    auto c = open_sparse_reader(o);
    CHECK(read_epoch(*c, 0) != a0);
    // A bounded buffer moves a row at most ~buffer positions earlier than in the file.
    std::map<std::string, size_t> where;
    for (size_t i = 0; i < file_order.size(); ++i) where[file_order[i]] = i;
    for (size_t i = 0; i < a0.size(); ++i) CHECK(where[a0[i]] <= i + 300);
}

TEST_CASE("cache: later epochs replay the parsed share, same rows and order as reading again") {
    TempDir dir;
    int64_t data_rows = 0;
    sparse_test::write_text(dir.file("c.svm"), libsvm_text(1500, data_rows));
    for (const int64_t shuffle : {int64_t{0}, int64_t{200}}) {
        auto o = libsvm_options(dir.file("c.svm"), 4000);
        o.shuffle_buffer = shuffle;
        o.seed = 7;
        auto uncached = open_sparse_reader(o);
        o.cache = true;
        auto cached = open_sparse_reader(o);
        for (int64_t epoch = 0; epoch < 3; ++epoch) CHECK(read_epoch(*cached, epoch) == read_epoch(*uncached, epoch));
        const auto s = cached->stats();
        CHECK(s.rows_parsed == data_rows);  // parsed once
        CHECK(s.cached_rows == data_rows);
        CHECK(uncached->stats().rows_parsed == 3 * data_rows);
    }
}

TEST_CASE("an epoch restarted before its end, and batches of every size") {
    TempDir dir;
    int64_t data_rows = 0;
    sparse_test::write_text(dir.file("r.svm"), libsvm_text(5000, data_rows));
    auto o = libsvm_options(dir.file("r.svm"), 6000);
    o.cache = true;
    auto reader = open_sparse_reader(o);
    CsrBatch b;
    reader->start_epoch(0);
    REQUIRE(reader->next(b, 10));
    CHECK(b.rows() == 10);
    const auto full = read_epoch(*reader, 0, 1);  // restarted: the cache of the cut epoch is not used
    CHECK(static_cast<int64_t>(full.size()) == data_rows);
    CHECK(read_epoch(*reader, 1, 1000) == full);
    CHECK_FALSE(reader->next(b, 10));
    CHECK(b.rows() == 0);
}

TEST_CASE("scan: rows, largest index and num_features 0") {
    TempDir dir;
    sparse_test::write_text(dir.file("n.svm"), "1 3:1 2000:1\n# c\n0 1:1\n\n2 5:1\n");
    auto o = libsvm_options(dir.file("n.svm"), 0);
    const auto scan = scan_sparse_share(o);
    CHECK(scan.rows == 3);
    CHECK(scan.max_index == 1999);
    CHECK(scan.max_label == 2);
    CHECK(sparse_num_features_for(1999) == 2048);
    CHECK(sparse_num_features_for(-1) == 1024);
    CHECK(sparse_num_features_for(1023) == 1024);
    CHECK(sparse_num_features_for(1024) == 2048);
    auto reader = open_sparse_reader(o);
    CHECK(reader->num_features() == 2048);
    CHECK_THAT(reader->description(), Contains("libsvm"));
    // A test file checked against the training file's count.
    sparse_test::write_text(dir.file("t.svm"), "1 2049:1\n");
    auto t = libsvm_options(dir.file("t.svm"), reader->num_features());
    auto test_reader = open_sparse_reader(t);
    CHECK_THROWS_WITH(read_epoch(*test_reader, 0), Contains("t.svm:1: feature index 2049 is past data.num_features = 2048"));
}

TEST_CASE("a line longer than the read buffer is an InputError, not unbounded memory") {
    TempDir dir;
    std::string line = "1";
    for (int i = 1; line.size() < (40 << 10); ++i) {
        line += ' ';
        line += std::to_string(i);
        line += ":1";
    }
    for (const std::string name : {"long.svm", "long.svm.gz"}) {
        if (name.size() > 8)
            sparse_test::write_gz(dir.file(name), "1 1:1\n" + line + "\n");
        else
            sparse_test::write_text(dir.file(name), "1 1:1\n" + line + "\n");
        auto reader = open_sparse_reader(libsvm_options(dir.file(name), 100000));
        CHECK_THROWS_WITH(read_epoch(*reader, 0), Contains(name + ":2: line longer than the read buffer"));
    }
    auto o = libsvm_options(dir.file("long.svm"), 10);
    o.buffer_bytes = 1000;
    CHECK_THROWS_AS(open_sparse_reader(o), InputError);
}

TEST_CASE("parsing on the caller's thread (one CPU) gives the parse thread's batches, errors and memory bound") {
    using ParseOn = SparseReaderOptions::ParseOn;
    TempDir dir;
    int64_t data_rows = 0;
    std::string text = write_plain_and_gz(dir, 6000, data_rows);
    for (const std::string name : {"p.svm", "p.svm.gz"})
        for (const int64_t shuffle : {int64_t{0}, int64_t{300}})
            for (const int rank : {0, 1}) {
                auto o = libsvm_options(dir.file(name), 7000);
                o.shuffle_buffer = shuffle;
                o.rank = rank;
                o.world = 2;
                o.parse_on = ParseOn::Thread;
                auto threaded = open_sparse_reader(o);
                o.parse_on = ParseOn::Caller;
                auto inline_reader = open_sparse_reader(o);
                for (int64_t epoch = 0; epoch < 2; ++epoch) {
                    const auto want = read_epoch(*threaded, epoch, 33);
                    CHECK(!want.empty());
                    CHECK(read_epoch(*inline_reader, epoch, 33) == want);
                }
                const auto s = inline_reader->stats();
                CHECK(s.bytes_parsed == threaded->stats().bytes_parsed);
                CHECK(s.peak_raw_bytes <= o.buffer_bytes);
                CHECK(s.peak_queued_bytes <= 2 * o.buffer_bytes / kSparseQueueBlocks);
            }
    // A malformed line fails on the caller's thread with the same message.
    size_t pos = 0;
    for (int line = 1; line < 4321; ++line) pos = text.find('\n', pos) + 1;
    text.insert(pos, "1 5:1 3:1\n");
    sparse_test::write_text(dir.file("bad.svm"), text);
    auto o = libsvm_options(dir.file("bad.svm"), 7000);
    o.parse_on = ParseOn::Caller;
    auto reader = open_sparse_reader(o);
    CHECK_THROWS_WITH(read_epoch(*reader, 0), Contains(dir.file("bad.svm") + ":4321: feature index 3 does not increase"));
}

TEST_CASE("parsing on the caller's thread parses about one batch a step (not a block every ~70 steps)") {
    // At 2+ ranks a step that parses a whole block makes every other rank wait for it at the next collective.
    using ParseOn = SparseReaderOptions::ParseOn;
    TempDir dir;
    int64_t data_rows = 0;
    write_plain_and_gz(dir, 6000, data_rows);
    for (const std::string name : {"p.svm", "p.svm.gz"})
        for (const int64_t shuffle : {int64_t{0}, int64_t{300}}) {
            auto o = libsvm_options(dir.file(name), 7000);
            o.shuffle_buffer = shuffle;
            o.parse_on = ParseOn::Caller;
            auto reader = open_sparse_reader(o);
            reader->start_epoch(0);
            constexpr int64_t kBatch = 50;
            CsrBatch b;
            int64_t consumed = 0, steps = 0, before = 0, max_step_rows = 0;
            while (reader->next(b, kBatch)) {
                consumed += b.rows();
                const int64_t parsed = reader->stats().rows_parsed;
                if (++steps > 1) max_step_rows = std::max(max_step_rows, parsed - before);  // the first fills the shuffle
                before = parsed;
                CHECK(parsed - consumed <= shuffle + kBatch);  // read ahead by at most about a batch
            }
            CHECK(consumed == data_rows);
            CHECK(steps >= data_rows / kBatch);
            CHECK(max_step_rows <= 2 * kBatch);
        }
    // The line bound still holds for the smaller reads.
    std::string line = "1";
    for (int i = 1; i < 2000; ++i) {
        line += ' ';
        line += std::to_string(i);
        line += ":1";
    }
    sparse_test::write_text(dir.file("long.svm"), "1 1:1\n" + line + "\n");
    auto o = libsvm_options(dir.file("long.svm"), 100000);
    o.buffer_bytes = 16 << 10;
    o.parse_on = ParseOn::Caller;
    auto reader = open_sparse_reader(o);
    CHECK_THROWS_WITH(read_epoch(*reader, 0), Contains("long.svm:2: line longer than the read buffer"));
}

TEST_CASE("parse_ahead: the same batches, at most the limit parsed ahead, nothing to do with a parse thread") {
    using ParseOn = SparseReaderOptions::ParseOn;
    TempDir dir;
    int64_t data_rows = 0;
    write_plain_and_gz(dir, 5000, data_rows);
    for (const std::string name : {"p.svm", "p.svm.gz"})
        for (const int64_t shuffle : {int64_t{0}, int64_t{300}})
            for (const bool cache : {false, true}) {
                INFO(name << " shuffle " << shuffle << " cache " << cache);
                auto o = libsvm_options(dir.file(name), 7000);
                o.shuffle_buffer = shuffle;
                o.cache = cache;
                o.parse_on = ParseOn::Caller;
                auto plain = open_sparse_reader(o);
                auto ahead = open_sparse_reader(o);
                CHECK(ahead->parses_on_caller());
                constexpr int64_t kBatch = 64, kLimit = 2 * kBatch;
                for (int64_t epoch = 0; epoch < 2; ++epoch) {
                    plain->start_epoch(epoch);
                    ahead->start_epoch(epoch);
                    CsrBatch a, b;
                    int64_t step = 0, pieces = 0;
                    for (;;) {
                        // A varying amount of work ahead before each batch, as the waits in collectives vary.
                        for (int64_t k = 0; k < step % 7; ++k) pieces += ahead->parse_ahead(kLimit) ? 1 : 0;
                        const bool more = plain->next(a, kBatch);
                        REQUIRE(ahead->next(b, kBatch) == more);
                        if (!more) break;
                        REQUIRE(b.labels == a.labels);
                        REQUIRE(b.offsets == a.offsets);
                        REQUIRE(b.indices == a.indices);
                        REQUIRE(b.values == a.values);
                        ++step;
                    }
                    // The first epoch parses (ahead too); a cached epoch replays and has nothing to parse.
                    if (epoch == 0 || !cache) CHECK(pieces > 0);
                    if (epoch == 1 && cache) CHECK(pieces == 0);
                    CHECK(!ahead->parse_ahead(kLimit));  // the share is used up
                }
                const SparseReaderStats s = ahead->stats();
                CHECK(s.rows_parsed == plain->stats().rows_parsed);
                CHECK(s.peak_queued_rows <= kLimit + 64);  // the limit, plus one piece
            }
    auto o = libsvm_options(dir.file("p.svm"), 7000);
    o.parse_on = ParseOn::Thread;
    auto threaded = open_sparse_reader(o);
    threaded->start_epoch(0);
    CHECK(!threaded->parse_ahead(1000));  // its thread parses ahead already
    CHECK(!threaded->parses_on_caller());
    CsrBatch b;
    CHECK(threaded->next(b, 10));
}
