#include "ringtrain/core/json_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "ringtrain/core/error.hpp"

namespace ringtrain {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A config or model file is a few KiB; the cap keeps `--config /dev/zero` from reading until memory runs out.
constexpr std::streamsize kMaxJsonFileBytes = std::streamsize{16} << 20;

// Builds the document from nlohmann's SAX events (its parser is iterative; only the value it builds could be
// deep), refusing what the default DOM builder accepts silently. Knows the JSON path of the value being read.
class StrictDomBuilder final : public nlohmann::json_sax<json> {
public:
    explicit StrictDomBuilder(const std::string& source) : source_(source) {}

    json take() { return std::move(root_); }

    bool null() override { return add(nullptr); }
    bool boolean(bool v) override { return add(v); }
    bool number_integer(number_integer_t v) override { return add(v); }
    bool number_unsigned(number_unsigned_t v) override { return add(v); }
    bool number_float(number_float_t v, const string_t&) override { return add(v); }
    bool string(string_t& v) override { return add(std::move(v)); }
    bool binary(binary_t& v) override { return add(json::binary(std::move(v))); }

    bool start_object(std::size_t) override { return open(json::object()); }
    bool start_array(std::size_t) override { return open(json::array()); }
    bool key(string_t& k) override {
        Frame& f = stack_.back();
        if (!f.keys.insert(k).second)
            fail(path(&k), "duplicate key; an object may name a key once (the parser would keep only the last)");
        f.pending_key = std::move(k);
        return true;
    }
    bool end_object() override { return close(); }
    bool end_array() override { return close(); }

    bool parse_error(std::size_t, const std::string& token, const nlohmann::detail::exception& e) override {
        if (e.id == 406) fail(path(), "the number " + token + " is out of range (it must fit a double)");
        throw InputError(source_ + ": not valid JSON: " + without_exception_id(e.what()));
    }

private:
    struct Frame {
        json value;
        std::string pending_key;  // objects: the key the next value goes under
        std::set<std::string> keys;
    };

    // ".train.lr", ".layers[2].kernel": where the next value goes (plus `next_key` inside an object).
    std::string path(const std::string* next_key = nullptr) const {
        std::string p;
        for (size_t i = 0; i < stack_.size(); ++i) {
            const Frame& f = stack_[i];
            const bool last = i + 1 == stack_.size();
            // Appended piece by piece: GCC 12 reports a false -Wrestrict for "[" + std::to_string(...) (PR 105329).
            if (f.value.is_array()) {
                p += '[';
                p += std::to_string(f.value.size());
                p += ']';
            } else if (last && next_key) {
                p += '.';
                p += *next_key;
            } else if (!last || !f.pending_key.empty()) {
                p += '.';
                p += f.pending_key;
            }
        }
        return p.empty() ? p : p.substr(p[0] == '.' ? 1 : 0);
    }

    [[noreturn]] void fail(std::string where, const std::string& message) const {
        if (where.size() > 80) where = where.substr(0, 80) + "...";  // one readable line, however deep
        throw InputError(source_ + ": " + (where.empty() ? "" : where + ": ") + message);
    }

    bool open(json empty) {
        if (stack_.size() >= static_cast<size_t>(kMaxJsonDepth))
            fail(path(), "nested deeper than " + std::to_string(kMaxJsonDepth) +
                             " levels; a config or model file needs only a few");
        stack_.push_back({std::move(empty), {}, {}});
        return true;
    }

    bool close() {
        json v = std::move(stack_.back().value);
        stack_.pop_back();
        return add(std::move(v));
    }

    bool add(json v) {
        if (stack_.empty()) {
            root_ = std::move(v);
            return true;
        }
        Frame& f = stack_.back();
        if (f.value.is_array())
            f.value.push_back(std::move(v));
        else
            f.value[f.pending_key] = std::move(v);
        return true;
    }

    const std::string& source_;
    std::vector<Frame> stack_;
    json root_;
};

}  // namespace

std::string without_exception_id(const std::string& what) {
    const auto close = what.find("] ");
    const std::string text =
        what.rfind("[json.exception.", 0) == 0 && close != std::string::npos ? what.substr(close + 2) : what;
    // The parser quotes the bytes it last read: a file's ill-formed UTF-8 or control bytes would reach the terminal
    // raw. Those are written \xHH; well-formed UTF-8 (a path's "modèle") stays as it is.
    std::string out;
    out.reserve(text.size());
    auto hex = [&out](unsigned char c) {
        char h[8];
        std::snprintf(h, sizeof h, "\\x%02X", c);
        out += h;
    };
    for (size_t i = 0; i < text.size();) {
        const unsigned char c = static_cast<unsigned char>(text[i]);
        if (c >= 0x20 && c < 0x7f) {
            out += static_cast<char>(c);
            ++i;
            continue;
        }
        // The length of a well-formed UTF-8 sequence starting here (0: none): lead byte, then continuation bytes.
        size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        for (size_t k = 1; k < len; ++k)
            if (i + k >= text.size() || (static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) len = 0;
        if (len == 0) {
            hex(c);
            ++i;
        } else {
            out.append(text, i, len);
            i += len;
        }
    }
    return out;
}

json parse_json_strictly(const std::string& text, const std::string& source) {
    StrictDomBuilder builder(source);
    json::sax_parse(text, &builder);
    return builder.take();
}

json read_json_file(const std::string& path, const std::string& what, const std::string& hint) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) throw InputError(path + ": " + what + " not found; " + hint);
    // A directory opens as a stream on Linux and fails only on the first read, with a libstdc++ message.
    if (fs::is_directory(st)) throw InputError(path + ": is a directory, not a " + what + "; " + hint);
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(path + ": cannot open the " + what + ": " + std::strerror(errno) + "; " + hint);
    std::string text;
    std::vector<char> buf(1 << 16);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        text.append(buf.data(), static_cast<size_t>(in.gcount()));
        if (static_cast<std::streamsize>(text.size()) > kMaxJsonFileBytes)
            throw InputError(path + ": larger than " + std::to_string(kMaxJsonFileBytes >> 20) + " MiB; is this a " +
                             what + "? " + hint);
    }
    if (in.bad()) throw InputError(path + ": read error in the " + what + ": " + std::strerror(errno));
    return parse_json_strictly(text, path);
}

std::string json_excerpt(const json& value, size_t max_chars) {
    std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
    if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
    return s;
}

}  // namespace ringtrain
