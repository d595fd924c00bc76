// The strict JSON reader of config and model files: what nlohmann accepts silently or fails on with a raw
// exception becomes an InputError naming the source and the JSON path.
#include <catch2/catch.hpp>

#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/json_file.hpp"

using namespace ringtrain;

namespace {

std::string error_of(const std::string& text) {
    try {
        parse_json_strictly(text, "f.json");
    } catch (const InputError& e) {
        return e.what();
    }
    FAIL_CHECK("no InputError for " << text.substr(0, 80));
    return "";
}

std::string nested(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

}  // namespace

TEST_CASE("strict JSON: a valid document parses as nlohmann would", "[core][json]") {
    const std::string text = R"({"a": {"b": [1, 2.5, "x", null, true, {"c": -3}]}, "d": 18446744073709551615})";
    CHECK(parse_json_strictly(text, "f.json") == nlohmann::json::parse(text));
    CHECK(parse_json_strictly(nested(kMaxJsonDepth), "f.json") == nlohmann::json::parse(nested(kMaxJsonDepth)));
}

TEST_CASE("strict JSON: duplicate keys are named by their path", "[core][json]") {
    CHECK_THAT(error_of(R"({"train": {"epochs": 1, "epochs": 2}})"),
               Catch::StartsWith("f.json: train.epochs: duplicate key"));
    CHECK_THAT(error_of(R"({"layers": [{"type": "relu"}, {"k": 1, "k": 1}]})"),
               Catch::StartsWith("f.json: layers[1].k: duplicate key"));
    // The same key in two different objects is fine.
    CHECK_NOTHROW(parse_json_strictly(R"({"a": {"k": 1}, "b": {"k": 1}})", "f.json"));
}

TEST_CASE("strict JSON: depth is bounded before anything recursive sees the value", "[core][json]") {
    CHECK_THAT(error_of(nested(kMaxJsonDepth + 1)), Catch::Contains("nested deeper than 64 levels"));
    const std::string msg = error_of(R"({"model": )" + nested(100000) + "}");
    CHECK_THAT(msg, Catch::StartsWith("f.json: model[0][0]"));
    CHECK(msg.size() < 300);  // one readable line, however deep the input
}

TEST_CASE("strict JSON: numbers past a double and syntax errors are InputErrors naming the source", "[core][json]") {
    CHECK_THAT(error_of(R"({"optimizer": {"lr": 1e400}})"),
               Catch::StartsWith("f.json: optimizer.lr: the number 1e400 is out of range"));
    const std::string syntax = error_of(R"({"a": )");
    CHECK_THAT(syntax, Catch::StartsWith("f.json: not valid JSON: "));
    CHECK_THAT(syntax, !Catch::Contains("[json.exception"));
}

TEST_CASE("strict JSON: files that are missing, folders or endless are named", "[core][json]") {
    CHECK_THROWS_WITH(read_json_file("/nonexistent/c.json", "config file", "pass a file"),
                      Catch::Equals("/nonexistent/c.json: config file not found; pass a file"));
    CHECK_THROWS_WITH(read_json_file("/tmp", "config file", "pass a file"), Catch::Contains("is a directory"));
    CHECK_THROWS_WITH(read_json_file("/dev/zero", "config file", "pass a file"), Catch::Contains("larger than 16 MiB"));
}

TEST_CASE("json_excerpt: compact, cut, and safe for invalid UTF-8", "[core][json]") {
    CHECK(json_excerpt(nlohmann::json{1, 2}) == "[1,2]");
    CHECK(json_excerpt(nlohmann::json(std::string(200, 'a'))).size() == 83);
    CHECK_NOTHROW(json_excerpt(nlohmann::json(std::string("\xff\xfe"))));
}
