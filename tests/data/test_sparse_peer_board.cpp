// Peer parsing (data/sparse_peer_board.hpp): pieces that cover a share's lines exactly once, a reader whose rows other
// ranks parsed handing out the very batches it would have parsed itself, and errors still named by their owner.
// The ranks are readers of one process here, sharing a board in ordinary memory (the trainer maps it shared).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/sparse_peer_board.hpp"
#include "ringtrain/data/sparse_reader.hpp"
#include "test_sparse_files.hpp"

using namespace ringtrain;
using namespace ringtrain::data;
using Catch::Contains;
using sparse_test::read_epoch;
using sparse_test::TempDir;

namespace {

// Zero-filled, page-aligned memory for a board, as a fresh shared-memory segment is.
struct BoardMemory {
    explicit BoardMemory(int ranks) : bytes(sparse_peer_board_bytes(ranks)) {
        base = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
        std::memset(base, 0, bytes);
    }
    ~BoardMemory() { std::free(base); }
    size_t bytes;
    void* base;
};

// libsvm lines of varied length: some far longer than a piece, comments, empty lines and CRLF mixed in; line i has
// feature i + 1, so every row is distinct.
std::string varied_libsvm(int rows, uint32_t seed) {
    std::mt19937 rng(seed);
    std::string s;
    for (int i = 0; i < rows; ++i) {
        if (rng() % 13 == 0) s += "# comment\n";
        if (rng() % 17 == 0) s += "\n";
        s += std::to_string(i % 2);
        s += ' ';
        s += std::to_string(i + 1);
        s += ":1";
        const int extra = rng() % 40 == 0 ? 900 : static_cast<int>(rng() % 12);  // ~4 in 100 lines span pieces
        for (int k = 0; k < extra; ++k) {
            s += ' ';
            s += std::to_string(rows + 10 + k);
            s += ":0.5";
        }
        s += rng() % 7 == 0 ? "\r\n" : "\n";
    }
    return s;
}

SparseReaderOptions caller_options(const std::string& path, int rank, int world) {
    SparseReaderOptions o;
    o.format = SparseFormat::Libsvm;
    o.file = path;
    o.num_features = 200000;
    o.buffer_bytes = 64 << 10;
    o.rank = rank;
    o.world = world;
    o.parse_on = SparseReaderOptions::ParseOn::Caller;
    return o;
}

}  // namespace

TEST_CASE("pieces cover the lines starting in a share exactly once, whoever reads them") {
    TempDir dir;
    for (const bool trailing_newline : {true, false}) {
        std::string text = varied_libsvm(3000, 7);
        if (!trailing_newline) text.pop_back();
        const std::string path = dir.file("v.svm");
        sparse_test::write_text(path, text);
        SparsePieceFile file(path, 3 * kSparsePieceBytes);  // a small window: many refills
        const auto size = static_cast<int64_t>(text.size());
        // Shares as the plain source cuts them: lines whose first byte is in [raw_begin, raw_end), begin moved to a
        // line start. Several worlds, so shares start and end anywhere in a line.
        for (const int world : {1, 2, 3, 7}) {
            std::string joined;
            for (int r = 0; r < world; ++r) {
                const int64_t raw_begin = size * r / world, end = size * (r + 1) / world;
                int64_t begin = raw_begin;
                if (begin > 0) begin = static_cast<int64_t>(text.find('\n', static_cast<size_t>(begin - 1))) + 1;
                if (begin <= 0 && raw_begin > 0) begin = size;  // no line starts at or after raw_begin
                const int64_t pieces = end > begin ? (end - begin + kSparsePieceBytes - 1) / kSparsePieceBytes : 0;
                int64_t expect_at = begin;
                for (int64_t k = 0; k < pieces; ++k) {
                    std::string_view piece;
                    int64_t offset = -1;
                    REQUIRE(read_sparse_piece(file, begin, end, k, 1 << 20, piece, offset));
                    if (!piece.empty()) {
                        CHECK(offset == expect_at);  // contiguous: each piece starts where the last one ended
                        CHECK(text.compare(static_cast<size_t>(offset), piece.size(), piece) == 0);
                        expect_at = offset + static_cast<int64_t>(piece.size());
                    }
                    joined += piece;
                }
            }
            CHECK(joined == text);  // every line once, in order, across the ranks' pieces
        }
        // A line longer than the bound: false, and the offset of that line's start.
        std::string_view piece;
        int64_t offset = -1;
        const size_t long_line = text.find(" 3909:0.5");  // only the ~9 KB lines have 900 extra features
        REQUIRE(long_line != std::string::npos);
        const int64_t line_start = static_cast<int64_t>(text.rfind('\n', long_line)) + 1;
        // The piece holding its start runs past its own end by more than the bound to finish it.
        CHECK_FALSE(read_sparse_piece(file, 0, size, line_start / kSparsePieceBytes, 64, piece, offset));
        CHECK(offset == line_start);
    }
}

TEST_CASE("a reader whose pieces peers parsed hands out the batches it would have parsed itself") {
    TempDir dir;
    const std::string path = dir.file("p.svm");
    sparse_test::write_text(path, varied_libsvm(8000, 11));
    // Batches of 57 rows take a piece or two at a time; of 600, runs of up to 16 own pieces read and parsed as one
    // text, cut short wherever a helper holds the next piece.
    for (const int64_t batch : {int64_t{57}, int64_t{600}})
    for (const int64_t shuffle : {int64_t{0}, int64_t{250}})
        for (const bool cache : {false, true})
            for (const int helps_per_step : {0, 1, 3, 40}) {
                INFO("batch " << batch << " shuffle " << shuffle << " cache " << cache << " helps per step "
                              << helps_per_step);
                BoardMemory mem(2);
                SparsePeerBoard board0(mem.base, mem.bytes, 2, 0), board1(mem.base, mem.bytes, 2, 1);
                auto o0 = caller_options(path, 0, 2), o1 = caller_options(path, 1, 2);
                o0.shuffle_buffer = o1.shuffle_buffer = shuffle;
                o0.cache = o1.cache = cache;
                auto reference = open_sparse_reader(o1);  // rank 1 alone, no board
                o0.peer_board = &board0;
                o1.peer_board = &board1;
                auto helper = open_sparse_reader(o0);
                auto owner = open_sparse_reader(o1);
                REQUIRE(owner->parses_with_peers());
                for (int64_t epoch = 0; epoch < 2; ++epoch) {
                    reference->start_epoch(epoch);
                    owner->start_epoch(epoch);
                    CsrBatch want, got;
                    for (int64_t step = 0;; ++step) {
                        for (int h = 0; h < helps_per_step; ++h) helper->help_peers();
                        const bool more = reference->next(want, batch);
                        REQUIRE(owner->next(got, batch) == more);
                        if (!more) break;
                        REQUIRE(got.labels == want.labels);
                        REQUIRE(got.offsets == want.offsets);
                        REQUIRE(got.indices == want.indices);
                        REQUIRE(got.values == want.values);
                    }
                }
                const SparseReaderStats o = owner->stats(), h = helper->stats();
                CHECK(o.rows_from_peers == h.rows_for_peers);  // every row a helper parsed was used, once
                if (helps_per_step == 0) CHECK(o.rows_from_peers == 0);
                if (helps_per_step >= 3 && batch == 57) CHECK(o.rows_from_peers > o.rows_parsed / 2);
                if (cache) CHECK(o.rows_parsed + o.rows_from_peers == o.cached_rows);  // only the first epoch parses
            }
}

TEST_CASE("a helper on another thread, racing its owner for the same pieces, changes nothing") {
    TempDir dir;
    const std::string path = dir.file("p.svm");
    sparse_test::write_text(path, varied_libsvm(20000, 5));
    BoardMemory mem(3);
    SparsePeerBoard b0(mem.base, mem.bytes, 3, 0), b1(mem.base, mem.bytes, 3, 1), b2(mem.base, mem.bytes, 3, 2);
    auto o2 = caller_options(path, 2, 3);
    auto reference = open_sparse_reader(o2);
    auto o0 = caller_options(path, 0, 3), o1 = caller_options(path, 1, 3);
    o0.peer_board = &b0;
    o1.peer_board = &b1;
    o2.peer_board = &b2;
    auto h0 = open_sparse_reader(o0), h1 = open_sparse_reader(o1), owner = open_sparse_reader(o2);
    std::atomic<bool> stop{false};
    auto help = [&](SparseBatchReader& r) {
        while (!stop.load()) r.help_peers();
    };
    std::thread t0(help, std::ref(*h0)), t1(help, std::ref(*h1));
    for (int64_t epoch = 0; epoch < 3; ++epoch) CHECK(read_epoch(*owner, epoch, 41) == read_epoch(*reference, epoch, 41));
    for (int64_t epoch = 3; epoch < 5; ++epoch)  // runs of own pieces, racing the helpers for each
        CHECK(read_epoch(*owner, epoch, 700) == read_epoch(*reference, epoch, 700));
    stop = true;
    t0.join();
    t1.join();
    CHECK(owner->stats().rows_from_peers == h0->stats().rows_for_peers + h1->stats().rows_for_peers);
}

TEST_CASE("peer parsing: a bad or too long line fails on its owner, naming the file and line") {
    TempDir dir;
    std::string text = varied_libsvm(4000, 3);
    // A line in rank 1's half whose indices do not increase.
    size_t pos = text.size() * 3 / 4;
    pos = text.find('\n', pos) + 1;
    int64_t line = 1;
    for (size_t i = 0; i < pos; ++i) line += text[i] == '\n' ? 1 : 0;
    text.insert(pos, "1 5:1 3:1\n");
    const std::string path = dir.file("bad.svm");
    sparse_test::write_text(path, text);
    for (const int helps_per_step : {0, 50}) {
        BoardMemory mem(2);
        SparsePeerBoard board0(mem.base, mem.bytes, 2, 0), board1(mem.base, mem.bytes, 2, 1);
        auto o0 = caller_options(path, 0, 2), o1 = caller_options(path, 1, 2);
        o0.peer_board = &board0;
        o1.peer_board = &board1;
        auto helper = open_sparse_reader(o0);
        auto owner = open_sparse_reader(o1);
        owner->start_epoch(0);
        CsrBatch b;
        auto read_all = [&] {
            for (;;) {
                for (int h = 0; h < helps_per_step; ++h) helper->help_peers();
                if (!owner->next(b, 64)) break;
            }
        };
        CHECK_THROWS_WITH(read_all(), Contains(path + ":" + std::to_string(line) + ": feature index 3 does not increase"));
    }
    // A line longer than the read buffer's quarter, parsed by a helper first: the owner names it.
    std::string long_line = "1";
    for (int i = 1; i < 4000; ++i) {  // ~26 KB
        long_line += ' ';
        long_line += std::to_string(i);
        long_line += ":1";
    }
    std::string lines, tail;  // short lines around it, so that it starts in rank 0's half
    for (int i = 1; i <= 200; ++i) lines += std::to_string(i % 2) + " " + std::to_string(i) + ":1\n";
    for (int i = 1; i <= 50; ++i) tail += "1 " + std::to_string(i) + ":1\n";
    const int64_t long_at = 201;
    sparse_test::write_text(dir.file("long.svm"), lines + long_line + "\n" + tail);
    BoardMemory mem(2);
    SparsePeerBoard board0(mem.base, mem.bytes, 2, 0), board1(mem.base, mem.bytes, 2, 1);
    // (caller_options' 64 KiB buffer bounds a line at 16 KiB: the generated lines fit, the ~26 KB one does not.)
    auto o0 = caller_options(dir.file("long.svm"), 1, 2), o1 = caller_options(dir.file("long.svm"), 0, 2);
    o0.peer_board = &board1;
    o1.peer_board = &board0;
    auto helper = open_sparse_reader(o0);
    auto owner = open_sparse_reader(o1);
    owner->start_epoch(0);
    for (int h = 0; h < 100; ++h) helper->help_peers();
    CsrBatch b;
    CHECK_THROWS_WITH([&] { while (owner->next(b, 64)) {} }(),
                      Contains("long.svm:" + std::to_string(long_at) + ": line longer than the read buffer"));
}

TEST_CASE("peer parsing is off for .gz shares and parse threads; a board too small is refused") {
    TempDir dir;
    const std::string text = varied_libsvm(500, 9);
    sparse_test::write_gz(dir.file("p.svm.gz"), text);
    sparse_test::write_text(dir.file("p.svm"), text);
    BoardMemory mem(2);
    SparsePeerBoard board(mem.base, mem.bytes, 2, 0);
    auto o = caller_options(dir.file("p.svm.gz"), 0, 2);
    o.peer_board = &board;
    CHECK_FALSE(open_sparse_reader(o)->parses_with_peers());
    o.file = dir.file("p.svm");
    o.parse_on = SparseReaderOptions::ParseOn::Thread;
    auto threaded = open_sparse_reader(o);
    CHECK_FALSE(threaded->parses_with_peers());
    CHECK_FALSE(threaded->help_peers());
    CHECK_THROWS_AS(SparsePeerBoard(mem.base, mem.bytes - 1, 2, 0), Error);
    CHECK_THROWS_AS(SparsePeerBoard(mem.base, mem.bytes, 2, 2), Error);
}

TEST_CASE("a piece whose rows do not fit a slot is parsed by its owner, the same rows") {
    TempDir dir;
    std::string text;  // 2-byte lines ("0\n": a row with no feature): ~2,000 rows a piece, more than a slot holds
    for (int i = 0; i < 20000; ++i) text += i % 3 == 0 ? "1\n" : "0\n";
    const std::string path = dir.file("tiny.svm");
    sparse_test::write_text(path, text);
    BoardMemory mem(2);
    SparsePeerBoard board0(mem.base, mem.bytes, 2, 0), board1(mem.base, mem.bytes, 2, 1);
    auto o0 = caller_options(path, 0, 2), o1 = caller_options(path, 1, 2);
    auto reference = open_sparse_reader(o1);
    o0.peer_board = &board0;
    o1.peer_board = &board1;
    auto helper = open_sparse_reader(o0);
    auto owner = open_sparse_reader(o1);
    reference->start_epoch(0);
    owner->start_epoch(0);
    CsrBatch want, got;
    int64_t rows = 0;
    for (;;) {
        for (int h = 0; h < 5; ++h) helper->help_peers();  // claims pieces, parses them, cannot publish them
        const bool more = reference->next(want, 500);
        REQUIRE(owner->next(got, 500) == more);
        if (!more) break;
        REQUIRE(got.labels == want.labels);
        REQUIRE(got.offsets == want.offsets);
        rows += got.rows();
    }
    CHECK(rows == 10000);
    CHECK(owner->stats().rows_from_peers == 0);
    CHECK(helper->stats().rows_for_peers == 0);
}
