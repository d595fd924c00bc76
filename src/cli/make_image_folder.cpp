#include "make_image_folder.hpp"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "tool_args.hpp"
#include "ringtrain/data/image_folder_generator.hpp"

namespace ringtrain::cli {

namespace {

const char* kUsage = R"(Usage:
  ringtrain make-image-folder --out DIR [--classes 2] [--per-class 100] [--size 32x32] [--channels 3]
                              [--format jpg|png|mixed] [--seed 1] [--quality 90]
  ringtrain make-image-folder --photos PHOTO[,PHOTO...] --out DIR [--per-class 100] [--size 128x128] [--seed 1]
Writes --per-class synthetic pictures into each of --classes sub-folders of DIR (0_horizontal, 1_vertical,
2_diagonal, 3_antidiagonal, 4_checks, 5_rings: stripes of random period, phase and colours, with noise), a data
set for data.format image_folder that a small CNN learns in seconds. mixed writes .jpg .png .ppm .bmp in turn.
With --photos: an image-quality folder instead, DIR/sharp and DIR/degraded, each holding the same random crops of
the photos (resized to --size), as they are and blurred or JPEG-compressed at quality 5-15 (scripts/make-demo-images.sh).
Write the training and the test folder with different seeds.
)";

template <class T>
T number(const std::string& flag, const std::string& text) {
    return tool_number<T>("make-image-folder", flag, text);
}

}  // namespace

int run_make_image_folder(int argc, char** argv, int world_size) {
    return run_tool([&] {
        ToolArgs a = parse_tool_args(
            "make-image-folder", argc, argv,
            {"--out", "--classes", "--per-class", "--size", "--channels", "--format", "--seed", "--quality",
             "--photos"},
            world_size, "one folder");
        if (a.help) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (!a.count("--out")) throw InputError("make-image-folder needs --out DIR; see `ringtrain make-image-folder --help`");
        data::ImageFolderSpec spec;
        spec.out = a["--out"];
        if (a.count("--classes")) spec.classes = number<int>("--classes", a["--classes"]);
        if (a.count("--per-class")) spec.per_class = number<int>("--per-class", a["--per-class"]);
        if (a.count("--channels")) spec.channels = number<int>("--channels", a["--channels"]);
        if (spec.channels != 1 && spec.channels != 3)
            throw InputError("make-image-folder: --channels must be 1 or 3 (got " + std::to_string(spec.channels) + ")");
        if (a.count("--seed")) spec.seed = number<uint64_t>("--seed", a["--seed"]);
        if (a.count("--quality")) spec.jpeg_quality = number<int>("--quality", a["--quality"]);
        if (spec.jpeg_quality < 1 || spec.jpeg_quality > 100)
            throw InputError("make-image-folder: --quality must be from 1 to 100");
        if (a.count("--size")) {
            const std::string& s = a["--size"];
            const auto x = s.find('x');
            if (x == std::string::npos) throw InputError("make-image-folder: --size: '" + s + "' is not HxW, e.g. 32x32");
            spec.height = number<int>("--size", s.substr(0, x));
            spec.width = number<int>("--size", s.substr(x + 1));
        }
        if (a.count("--format")) {
            const std::string& f = a["--format"];
            if (f == "jpg" || f == "jpeg")
                spec.format = data::ImageFileFormat::Jpeg;
            else if (f == "png")
                spec.format = data::ImageFileFormat::Png;
            else if (f == "mixed")
                spec.format = data::ImageFileFormat::Mixed;
            else
                throw InputError("make-image-folder: --format must be jpg, png or mixed (got '" + f + "')");
        }
        if (spec.classes < 1 || spec.classes > data::kPatternClasses)
            throw InputError("make-image-folder: --classes must be from 1 to " + std::to_string(data::kPatternClasses));
        const auto t0 = std::chrono::steady_clock::now();
        if (a.count("--photos")) {
            std::vector<std::string> photos;
            for (size_t at = 0, comma; at <= a["--photos"].size(); at = comma + 1) {
                comma = a["--photos"].find(',', at);
                if (comma == std::string::npos) comma = a["--photos"].size();
                if (comma > at) photos.push_back(a["--photos"].substr(at, comma - at));
            }
            if (!a.count("--size")) spec.height = spec.width = 128;
            const auto files = data::write_quality_image_folder(photos, spec);
            std::fprintf(stderr, "make-image-folder: %zu images (sharp and degraded x %d, %dx%d, from %zu photos) to %s\n",
                         files.size(), spec.per_class, spec.height, spec.width, photos.size(), spec.out.c_str());
            return 0;
        }
        const auto files = data::write_pattern_image_folder(spec);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "make-image-folder: %zu images (%d classes x %d, %dx%d) to %s in %.2f s\n", files.size(),
                     spec.classes, spec.per_class, spec.height, spec.width, spec.out.c_str(), secs);
        return 0;
    });
}

}  // namespace ringtrain::cli
