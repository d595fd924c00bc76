// The libsvm and Criteo line parsers: accepted forms, every malformed-line case (through the reader, so the
// InputError names the file and its true line number), and the Criteo hash and integer transform, pinned.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/data/sparse_criteo.hpp"
#include "ringtrain/data/sparse_libsvm.hpp"
#include "ringtrain/data/sparse_reader.hpp"
#include "test_sparse_files.hpp"

using namespace ringtrain;
using namespace ringtrain::data;
using Catch::Contains;
using sparse_test::TempDir;

namespace {

CsrBatch parse_libsvm(const std::string& line, LibsvmOptions o = {}) {
    CsrBatch b;
    LibsvmLineParser(o).parse(line, b);
    return b;
}

// The message of the InputError that reading all of `text` (as a file) raises.
std::string read_error(const std::string& text, SparseFormat format, const std::string& name = "bad.txt",
                       int64_t num_features = 100) {
    TempDir dir;
    const std::string path = dir.file(name);
    if (name.size() > 3 && name.substr(name.size() - 3) == ".gz")
        sparse_test::write_gz(path, text);
    else
        sparse_test::write_text(path, text);
    SparseReaderOptions o;
    o.format = format;
    o.file = path;
    o.num_features = num_features;
    o.hash_bits = 10;
    try {
        auto reader = open_sparse_reader(o);
        sparse_test::read_epoch(*reader, 0);
    } catch (const InputError& e) {
        const std::string msg = e.what();
        CHECK(msg.find('\n') == std::string::npos);  // one line
        CHECK_THAT(msg, Contains(path + ":"));
        return msg;
    }
    FAIL("no InputError for " << text);
    return "";
}

std::string criteo_line(const std::string& label, const std::vector<std::string>& ints,
                        const std::vector<std::string>& cats) {
    std::string s = label;
    for (int c = 0; c < kCriteoIntegerColumns; ++c) s += "\t" + (c < static_cast<int>(ints.size()) ? ints[c] : "");
    for (int c = 0; c < 26; ++c) s += "\t" + (c < static_cast<int>(cats.size()) ? cats[c] : "");
    return s;
}

}  // namespace

TEST_CASE("libsvm: labels, idx:val, qid, comments, CRLF, index base") {
    auto b = parse_libsvm("+1 3:0.5 7:2 10:1e-3\r");
    REQUIRE(b.rows() == 1);
    CHECK(b.labels[0] == 1.0f);
    CHECK(b.indices == std::vector<uint32_t>{2, 6, 9});  // 1-based -> 0-based
    CHECK(b.values == std::vector<float>{0.5f, 2.0f, 1e-3f});
    CHECK(parse_libsvm("-1 1:1").labels[0] == 0.0f);
    CHECK(parse_libsvm("0 1:1").labels[0] == 0.0f);
    CHECK(parse_libsvm("1.0 1:1").labels[0] == 1.0f);
    CHECK(parse_libsvm("4 1:1").labels[0] == 4.0f);
    b = parse_libsvm("1 qid:17 2:1 4:+1.5 # trailing comment 9:9");
    CHECK(b.indices == std::vector<uint32_t>{1, 3});
    CHECK(b.values == std::vector<float>{1.0f, 1.5f});
    b = parse_libsvm("1\t0:1\t5:2", LibsvmOptions{0, 0, 0});
    CHECK(b.indices == std::vector<uint32_t>{0, 5});
    b = parse_libsvm("0");  // a row without features
    CHECK(b.rows() == 1);
    CHECK(b.nnz() == 0);
    CsrBatch none;
    LibsvmLineParser p{LibsvmOptions{}};
    CHECK_FALSE(p.parse("", none));
    CHECK_FALSE(p.parse("   \r", none));
    CHECK_FALSE(p.parse("# only a comment", none));
    CHECK(none.rows() == 0);
}

TEST_CASE("libsvm: every malformed line is an InputError naming file and line") {
    const std::string good = "1 1:1 2:1\n0 3:1\n";
    // The bad line is line 3 of each file.
    CHECK_THAT(read_error(good + "x 1:1\n", SparseFormat::Libsvm), Contains(":3: bad label 'x'"));
    CHECK_THAT(read_error(good + "0.5 1:1\n", SparseFormat::Libsvm), Contains(":3: bad label '0.5'"));
    CHECK_THAT(read_error(good + "-2 1:1\n", SparseFormat::Libsvm), Contains(":3: bad label '-2'"));
    CHECK_THAT(read_error(good + "1 4\n", SparseFormat::Libsvm), Contains(":3: bad feature '4'"));
    CHECK_THAT(read_error(good + "1 a:1\n", SparseFormat::Libsvm), Contains(":3: bad feature index in 'a:1'"));
    CHECK_THAT(read_error(good + "1 -4:1\n", SparseFormat::Libsvm), Contains(":3: bad feature index"));
    CHECK_THAT(read_error(good + "1 4:\n", SparseFormat::Libsvm), Contains(":3: bad feature value in '4:'"));
    CHECK_THAT(read_error(good + "1 4:x\n", SparseFormat::Libsvm), Contains(":3: bad feature value"));
    CHECK_THAT(read_error(good + "1 4:nan\n", SparseFormat::Libsvm), Contains(":3: bad feature value"));
    CHECK_THAT(read_error(good + "1 4:1 4:1\n", SparseFormat::Libsvm), Contains(":3: feature index 4 does not increase"));
    CHECK_THAT(read_error(good + "1 5:1 4:1\n", SparseFormat::Libsvm), Contains(":3: feature index 4 does not increase"));
    CHECK_THAT(read_error(good + "1 0:1\n", SparseFormat::Libsvm), Contains(":3: feature index 0"));
    CHECK_THAT(read_error(good + "1 101:1\n", SparseFormat::Libsvm), Contains(":3: feature index 101 is past data.num_features = 100"));
    CHECK_THAT(read_error(good + "1 qid:x 2:1\n", SparseFormat::Libsvm), Contains(":3: bad qid"));
    // CRLF, comments and empty lines count as lines.
    CHECK_THAT(read_error("# header\r\n\r\n1 1:1\r\n1 2:z\r\n", SparseFormat::Libsvm), Contains(":4: bad feature value"));
    // gzip: the same line numbers.
    CHECK_THAT(read_error(good + "\n1 1:1 q\n", SparseFormat::Libsvm, "bad.txt.gz"), Contains(":4: bad feature 'q'"));
}

TEST_CASE("libsvm: num_classes bounds labels") {
    LibsvmLineParser p{LibsvmOptions{1, 0, 3}};
    CsrBatch b;
    CHECK(p.parse("2 1:1", b));
    CHECK_THROWS_WITH(p.parse("3 1:1", b), Contains("label 3 is not a class number below 3"));
}

TEST_CASE("criteo: integer transform and hash are pinned") {
    CHECK(criteo_log2_bucket(-5) == -5);
    CHECK(criteo_log2_bucket(0) == 0);
    CHECK(criteo_log2_bucket(2) == 2);
    CHECK(criteo_log2_bucket(3) == 1);    // ln(3)^2 = 1.207
    CHECK(criteo_log2_bucket(10) == 5);   // ln(10)^2 = 5.30
    CHECK(criteo_log2_bucket(1000) == 47);  // ln(1000)^2 = 47.7
    // FNV-1a 64 over {column byte, key bytes}, mix64, low bits: these values must never change (saved models and
    // the generator's truth depend on them).
    CHECK(criteo_feature_index(14, "68fd1e64", 20) == 0x15472u);  // computed independently (Python)
    CHECK(criteo_feature_index(1, "5", 20) == 0x8ecd2u);
    CHECK(criteo_feature_index(14, "68fd1e64", 24) % (1u << 20) == criteo_feature_index(14, "68fd1e64", 20));
    CHECK(criteo_feature_index(15, "68fd1e64", 20) != criteo_feature_index(14, "68fd1e64", 20));
}

TEST_CASE("criteo: one feature per present field, missing fields, merged duplicates") {
    CriteoLineParser p(20, CriteoIntegers::Log2);
    CsrBatch b;
    REQUIRE(p.parse(criteo_line("1", {"5", "", "1000", "-1"}, {"68fd1e64", "", "abc"}) + "\r", b));
    CHECK(b.labels[0] == 1.0f);
    REQUIRE(b.nnz() == 5);  // I1, I3, I4, C1, C3
    std::vector<uint32_t> want = {criteo_feature_index(1, "2", 20), criteo_feature_index(3, "47", 20),
                                  criteo_feature_index(4, "-1", 20), criteo_feature_index(14, "68fd1e64", 20),
                                  criteo_feature_index(16, "abc", 20)};
    std::sort(want.begin(), want.end());
    CHECK(b.indices == want);
    CHECK(b.values == std::vector<float>(5, 1.0f));

    CriteoLineParser raw(20, CriteoIntegers::Hash);
    b.clear();
    REQUIRE(raw.parse(criteo_line("0", {"05"}, {}), b));
    CHECK(b.labels[0] == 0.0f);
    CHECK(b.indices == std::vector<uint32_t>{criteo_feature_index(1, "05", 20)});

    // With 1 hash bit, 39 present fields collide into at most 2 features whose values sum to 39.
    CriteoLineParser tiny(1, CriteoIntegers::Log2);
    std::vector<std::string> ints(13, "7"), cats(26, "x");
    b.clear();
    REQUIRE(tiny.parse(criteo_line("1", ints, cats), b));
    float sum = 0;
    for (int64_t k = 0; k < b.nnz(); ++k) sum += b.values[static_cast<size_t>(k)];
    CHECK(sum == 39.0f);
    for (int64_t k = 1; k < b.nnz(); ++k) CHECK(b.indices[static_cast<size_t>(k)] > b.indices[static_cast<size_t>(k - 1)]);
    CHECK_FALSE(p.parse("", b));
}

TEST_CASE("criteo: malformed lines name file and line") {
    const std::string good = criteo_line("0", {"1"}, {"a"}) + "\n" + criteo_line("1", {}, {"b"}) + "\n";
    CHECK_THAT(read_error(good + "1\t2\t3\n", SparseFormat::Criteo), Contains(":3: 3 tab-separated columns, expected 40"));
    CHECK_THAT(read_error(good + criteo_line("1", {}, {}) + "\textra\n", SparseFormat::Criteo),
               Contains(":3: 41 tab-separated columns"));
    CHECK_THAT(read_error(good + criteo_line("2", {}, {}) + "\n", SparseFormat::Criteo), Contains(":3: bad label '2'"));
    CHECK_THAT(read_error(good + criteo_line("", {}, {}) + "\n", SparseFormat::Criteo), Contains(":3: bad label ''"));
    CHECK_THAT(read_error(good + criteo_line("1", {"", "", "", "", "abc"}, {}) + "\n", SparseFormat::Criteo),
               Contains(":3: column I5: 'abc' is not an integer"));
    CHECK_THAT(read_error(good + criteo_line("1", {"1.5"}, {}) + "\n", SparseFormat::Criteo),
               Contains(":3: column I1: '1.5' is not an integer"));
    CHECK_THAT(read_error(good + "\r\n" + criteo_line("1", {"x"}, {}) + "\r\n", SparseFormat::Criteo, "bad.gz"),
               Contains(":4: column I1"));
}

TEST_CASE("bad options are InputErrors") {
    CHECK_THROWS_AS(CriteoLineParser(0, CriteoIntegers::Log2), InputError);
    CHECK_THROWS_AS(CriteoLineParser(32, CriteoIntegers::Log2), InputError);
    CHECK_THROWS_AS(LibsvmLineParser(LibsvmOptions{2, 0, 0}), InputError);
    SparseReaderOptions o;
    o.file = "/nonexistent/file.svm";
    o.num_features = 10;
    CHECK_THROWS_WITH(open_sparse_reader(o), Contains("/nonexistent/file.svm: cannot open"));
}

TEST_CASE("libsvm: the short-decimal fast path gives from_chars' float, bit for bit") {
    // Every value the fast path takes (at most 7 digits, any point position, signs) and some it hands on.
    std::vector<std::string> values = {"0", "1", "-1", "+2", "0.5", "0.25", "-3.5", ".5", "5.", "9999999", "0.0000001",
                                       "1234.567", "0.1", "0.3", "0.7", "3.1415926", "12345678", "0.12345678",
                                       "1e-3", "2.5E+2", "-0.0", "1.0000001"};
    uint64_t state = 12345;
    for (int i = 0; i < 20000; ++i) {  // random 1-7 digit decimals with the point anywhere
        const uint64_t r = splitmix64_next(state);
        const int digits = 1 + static_cast<int>(r % 7);
        std::string d = std::to_string((r >> 8) % 10000000);
        d = d.substr(0, static_cast<size_t>(std::min<int>(digits, static_cast<int>(d.size()))));
        const size_t point = static_cast<size_t>((r >> 40) % (d.size() + 1));
        std::string v = (r >> 50) & 1 ? "-" : "";
        v.append(d, 0, point).append(".").append(d, point);
        values.push_back(v);
    }
    for (const std::string& text : values) {
        const CsrBatch b = parse_libsvm("1 1:" + text);
        std::string_view s = text;
        if (s[0] == '+') s.remove_prefix(1);
        float want = 0;
        std::from_chars(s.data(), s.data() + s.size(), want);
        REQUIRE(b.values.size() == 1);
        INFO(text);
        CHECK(std::bit_cast<uint32_t>(b.values[0]) == std::bit_cast<uint32_t>(want));
    }
}

TEST_CASE("libsvm: the fast token paths give from_chars' ids and floats, bit for bit, wherever the token sits") {
    // A token with 16 or more bytes of line from its start is classified in place; nearer the line's end, from the
    // line's last bytes (or a copy, for a short line); values of more than 7 digits, signs and exponents take the
    // byte loop or the general one. Every place must give what from_chars gives.
    std::vector<std::string> values = {"0", "1", "5.", "9999999", "0.0000001", "1234.567", "0.1", "0.25", "7.5",
                                       "12345678", "0.12345678", "1e-3", "-0.5", "1.0000001", "0.", "00000001",
                                       "+3", "2.5E+2", "1234567.", "1.234567", "9.999999"};
    uint64_t state = 777;
    for (int i = 0; i < 5000; ++i) {
        const uint64_t r = splitmix64_next(state);
        std::string d = std::to_string((r >> 8) % 10000000).substr(0, 1 + static_cast<size_t>(r % 7));
        const size_t point = static_cast<size_t>((r >> 40) % (d.size() + 2));
        values.push_back(point > d.size() ? d : d.substr(0, point) + "." + d.substr(point));
    }
    const std::string tail = " 90000001:1 90000002:0.5 90000003:2";  // 35 bytes after the tested token
    const std::vector<uint64_t> indices = {1, 9, 10, 4711, 999999, 1000000, 9999999, 12345678};
    const std::vector<std::string> separators = {" ", "\t", "  ", " \t "};
    LibsvmOptions o;
    o.num_features = 100000000;
    for (size_t i = 0; i < values.size(); ++i) {
        const uint64_t idx = indices[i % indices.size()];
        const std::string token = std::to_string(idx) + ":" + values[i];
        std::string_view v = values[i];
        if (v[0] == '+') v.remove_prefix(1);
        float want = 0;
        std::from_chars(v.data(), v.data() + v.size(), want);
        INFO(token);
        const std::string sep = separators[i % separators.size()];
        // Before a long tail; last on a long line; last on a short line; last before a '\r'; after a run of blanks.
        const std::vector<std::string> lines = {"1" + sep + token + tail, "1" + std::string(20, ' ') + token,
                                                "1" + sep + token, "1 " + token + "\r",
                                                "0\t\t\t\t\t\t\t\t\t\t" + token + tail};
        for (const std::string& line : lines) {
            INFO(line);
            const CsrBatch b = parse_libsvm(line, o);
            REQUIRE(b.rows() == 1);
            bool found = false;
            for (size_t k = 0; k < b.indices.size(); ++k) {
                if (b.indices[k] != idx - 1) continue;
                found = true;
                CHECK(std::bit_cast<uint32_t>(b.values[k]) == std::bit_cast<uint32_t>(want));
            }
            CHECK(found);
        }
    }
    // Comments stop the fast path wherever they start; what comes before them is kept.
    CHECK(parse_libsvm("1 2:1#c 3:1", o).indices == std::vector<uint32_t>{1});
    CHECK(parse_libsvm("1 2:1 3:0.5 4:1 5:1 6:1 7:1 8:1 9:1 #c 10:1", o).indices.size() == 8);
    CHECK(parse_libsvm("1 2:1 3:0.5 4:1 5:1 6:1 7:1 8:1 9:0.25#c 10:1", o).values.back() == 0.25f);
    CHECK(parse_libsvm("1#c 2:1", o).nnz() == 0);
    CHECK(parse_libsvm("1#c 2:1", o).labels == std::vector<float>{1.0f});
    CsrBatch none;
    CHECK_FALSE(LibsvmLineParser(o).parse("#1 2:1", none));
    CHECK_FALSE(LibsvmLineParser(o).parse("  # 1 2:1", none));
    // Errors are the byte path's, whichever path met the token first.
    CHECK_THROWS_WITH(parse_libsvm("1 5:1 3:1" + tail, o), Catch::Contains("feature index 3 does not increase"));
    CHECK_THROWS_WITH(parse_libsvm("1 0:1" + tail, o), Catch::Contains("feature index 0"));
    o.num_features = 1000;
    CHECK_THROWS_WITH(parse_libsvm("1 1001:1" + tail, o), Catch::Contains("past data.num_features"));
}
