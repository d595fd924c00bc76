// The bad-input corpus (tests/bad_inputs/cases.txt): every case must end with exit code 2 and one line naming the
// file or key at fault, and must write nothing. Adding a case is one line there (plus a config or model file).
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "support/run_command.hpp"

using namespace rt_test;
namespace fs = std::filesystem;

namespace {

struct Case {
    std::string name, args, expect;
    std::map<std::string, std::string> settings;
};

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<Case> read_cases(const std::string& path) {
    std::ifstream in(path);
    std::vector<Case> cases;
    std::string line;
    while (std::getline(in, line)) {
        if (trim(line).empty() || trim(line)[0] == '#') continue;
        std::vector<std::string> cols;
        std::stringstream ss(line);
        for (std::string col; std::getline(ss, col, '|');) cols.push_back(trim(col));
        INFO(line);
        REQUIRE((cols.size() == 3 || cols.size() == 4));
        Case c{cols[0], cols[1], cols[2], {}};
        if (cols.size() == 4) {
            std::stringstream st(cols[3]);
            for (std::string kv; st >> kv;) c.settings[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
        }
        cases.push_back(c);
    }
    return cases;
}

// IDX files of unsigned bytes (big-endian header), written by the test rather than kept in the tree.
void write_idx(const std::string& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& values) {
    std::ofstream out(path, std::ios::binary);
    const uint8_t magic[4] = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
    out.write(reinterpret_cast<const char*>(magic), 4);
    for (uint32_t d : dims) {
        const uint8_t be[4] = {uint8_t(d >> 24), uint8_t(d >> 16), uint8_t(d >> 8), uint8_t(d)};
        out.write(reinterpret_cast<const char*>(be), 4);
    }
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size()));
}

void write_split(const std::string& dir, const std::string& prefix, uint32_t n, uint32_t rows, uint32_t cols,
                 uint8_t extra_label) {
    std::vector<uint8_t> pixels(size_t(n) * rows * cols), labels(n);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 37);
    for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 10);
    labels[n - 1] = extra_label;
    write_idx(dir + "/" + prefix + "-images-idx3-ubyte", {n, rows, cols}, pixels);
    write_idx(dir + "/" + prefix + "-labels-idx1-ubyte", {n}, labels);
}

// An IDX data folder whose training split is fine and whose test split is not, as `name` says.
std::string make_data(const std::string& name, const std::string& dir) {
    fs::create_directories(dir);
    write_split(dir, "train", 128, 28, 28, 9);
    if (name == "test_label_10")
        write_split(dir, "t10k", 32, 28, 28, 10);
    else if (name == "test_14x56")
        write_split(dir, "t10k", 32, 14, 56, 9);
    else
        FAIL("unknown data generator " << name);
    return dir;
}

std::string make_generated(const std::string& name, const std::string& tmp) {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    const std::string path = name == "latest"  ? tmp + "/checkpoints/latest"
                             : name == "directory" ? tmp + "/" + name
                                                   : tmp + "/" + name + ".json";
    if (name == "deep_config")
        write_file(path, R"({"model": )" + deep + "}");
    else if (name == "deep_model")
        write_file(path, R"({"input": [784], "layers": )" + deep + "}");
    else if (name == "directory")
        fs::create_directories(path);
    else if (name == "latest") {  // a checkpoint folder's pointer to its newest checkpoint
        fs::create_directories(tmp + "/checkpoints");
        write_file(path, "ckpt-000000040.bin\n");
    }
    else
        FAIL("unknown generated file " << name);
    return path;
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
    for (size_t p = 0; (p = text.find(from, p)) != std::string::npos; p += to.size()) text.replace(p, from.size(), to);
    return text;
}

// Fills the placeholders of `text` (see cases.txt); {cfg:NAME} and {gen:NAME} make their files on first use.
std::string expand(std::string text, const std::map<std::string, std::string>& vars, const std::string& tmp) {
    for (const auto& [k, v] : vars) text = replace_all(text, "{" + k + "}", v);
    for (size_t p; (p = text.find("{cfg:")) != std::string::npos || (p = text.find("{gen:")) != std::string::npos;) {
        const size_t end = text.find('}', p);
        const std::string kind = text.substr(1 + p, 3), name = text.substr(p + 5, end - p - 5);
        std::string path;
        if (kind == "gen") {
            path = make_generated(name, tmp);
        } else {
            std::ifstream in(source_dir() + "/tests/bad_inputs/configs/" + name + ".json");
            REQUIRE(in);
            std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            path = tmp + "/" + name + ".json";
            write_file(path, expand(body, vars, tmp));
        }
        text.replace(p, end - p + 1, path);
    }
    return text;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::stringstream ss(text);
    for (std::string l; std::getline(ss, l);)
        if (!trim(l).empty()) lines.push_back(l);
    return lines;
}

}  // namespace

TEST_CASE("every case of the bad-input corpus exits 2 with one line naming the file or key, writing nothing",
          "[cli][bad_inputs]") {
    const auto cases = read_cases(source_dir() + "/tests/bad_inputs/cases.txt");
    REQUIRE(cases.size() >= 25);
    const std::string root = temp_dir("bad-inputs");
    for (size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        const std::string tmp = root + "/case" + std::to_string(i), cwd = tmp + "/cwd", out = tmp + "/out";
        fs::create_directories(cwd);  // the run's working folder: must stay empty
        std::map<std::string, std::string> vars{{"src", source_dir()}, {"tmp", tmp}, {"out", out}};
        if (c.settings.count("model")) {
            const std::string m = c.settings.at("model");
            vars["model"] = m.rfind("gen:", 0) == 0 ? make_generated(m.substr(4), tmp)
                                                    : source_dir() + "/tests/bad_inputs/models/" + m + ".json";
        }
        if (c.settings.count("data")) vars["data"] = make_data(c.settings.at("data"), tmp + "/data");
        const std::string args = expand(c.args, vars, tmp);
        const auto r = run_command("cd " + cwd + " && " + binary() + " " + args + " < /dev/null");
        const auto lines = lines_of(r.output);
        INFO("case '" << c.name << "': ringtrain " << args << "\n" << r.output.substr(0, 2000));
        CHECK(r.exit_code == 2);
        CHECK(lines.size() == 1);
        CHECK_THAT(r.output, Catch::StartsWith("ringtrain: error: "));
        CHECK_THAT(r.output, Catch::Contains(c.expect));
        CHECK(!fs::exists(out));
        CHECK(fs::is_empty(cwd));
    }
}
