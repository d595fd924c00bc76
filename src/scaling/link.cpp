// Link parsing and the least-squares line fit (see the header).
#include "ringtrain/scaling/link.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"

namespace ringtrain::scaling {

namespace {

// "10gbit" -> (10, "gbit"); the unit lower-cased. Throws when there is no number first (positive; a latency may be
// 0, as a fit over shared memory can give).
std::pair<double, std::string> number_and_unit(const std::string& part, const std::string& what, bool zero_ok = false) {
    const char* begin = part.c_str();
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    if (end == begin || !(v > 0 || (zero_ok && v == 0)) || v > 1e18)
        throw InputError("--link: " + what + " '" + part + "' needs a " + (zero_ok ? "number >= 0" : "positive number") +
                         " first, e.g. 10gbit,5us");
    std::string unit(end);
    for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return {v, unit};
}

}  // namespace

Link parse_link(const std::string& text) {
    const auto comma = text.find(',');
    const std::string rate_part = text.substr(0, comma);
    const std::string lat_part = comma == std::string::npos ? "5us" : text.substr(comma + 1);
    const auto [rate, rate_unit] = number_and_unit(rate_part, "rate");
    double bits_per_s = 0;
    if (rate_unit == "gbit")
        bits_per_s = rate * 1e9;
    else if (rate_unit == "mbit")
        bits_per_s = rate * 1e6;
    else if (rate_unit == "kbit")
        bits_per_s = rate * 1e3;
    else
        throw InputError("--link: rate '" + rate_part + "': unknown unit '" + rate_unit + "'; use gbit, mbit or kbit");
    const auto [lat, lat_unit] = number_and_unit(lat_part, "latency", true);
    double seconds = 0;
    if (lat_unit == "us")
        seconds = lat * 1e-6;
    else if (lat_unit == "ms")
        seconds = lat * 1e-3;
    else if (lat_unit == "s")
        seconds = lat;
    else
        throw InputError("--link: latency '" + lat_part + "': unknown unit '" + lat_unit + "'; use us, ms or s");
    Link link;
    link.alpha_s = seconds;
    link.beta_s_per_byte = 8.0 / bits_per_s;
    link.source = "given " + text;
    return link;
}

LineFit fit_line(std::span<const double> bytes, std::span<const double> seconds, std::span<const double> weights) {
    if (bytes.size() != seconds.size() || bytes.size() < 2) throw Error("fit_line: needs two or more points");
    if (!weights.empty() && weights.size() != bytes.size()) throw Error("fit_line: one weight per point");
    auto w = [&](size_t i) { return weights.empty() ? 1.0 : weights[i]; };
    double sw = 0, sx = 0, sy = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
        sw += w(i);
        sx += w(i) * bytes[i];
        sy += w(i) * seconds[i];
    }
    if (!(sw > 0)) throw Error("fit_line: the weights add up to nothing");
    const double mx = sx / sw, my = sy / sw;
    double sxx = 0, sxy = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
        sxx += w(i) * (bytes[i] - mx) * (bytes[i] - mx);
        sxy += w(i) * (bytes[i] - mx) * (seconds[i] - my);
    }
    if (!(sxx > 0)) throw Error("fit_line: every point has the same size");
    LineFit f;
    f.slope = sxy / sxx;
    f.intercept = my - f.slope * mx;
    return f;
}

}  // namespace ringtrain::scaling
