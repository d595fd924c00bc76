// ImageFolderDataset: without the cache, decode_transform_image from the file's bytes; with it, the image decoded
// (JPEG DCT-scaled) and resized to the stored size once, then transform_image on every read. Without a random
// resized crop both give the same bytes (the transform resizes to the target either way). Files decoded to their end
// once are remembered by stamp, so later training reads of a JPEG may stop after the crop (DecodeExtent).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <thread>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/data/image_folder.hpp"

namespace ringtrain::data {

namespace {

int64_t image_bytes(const Image& im) { return static_cast<int64_t>(im.pixels.size()); }

// Decode buffers reused by each thread (a worker decodes image after image).
struct DecodeScratch {
    std::vector<uint8_t> bytes;
    Image decoded;
};
thread_local DecodeScratch t_scratch;

// A non-zero key of a file's stamp (0 marks a file not yet decoded completely).
uint64_t stamp_key(const FileStamp& stamp) {
    const uint64_t h = fnv1a(&stamp.mtime_ns, sizeof stamp.mtime_ns, fnv1a(&stamp.size, sizeof stamp.size));
    return h == 0 ? 1 : h;
}

std::unique_ptr<std::atomic<uint64_t>[]> no_file_decoded(size_t n) {
    auto slots = std::make_unique<std::atomic<uint64_t>[]>(n);
    for (size_t i = 0; i < n; ++i) slots[i].store(0, std::memory_order_relaxed);
    return slots;
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(ImageFolderListing listing, ImageFolderOptions options)
    : listing_(std::move(listing)), opt_(std::move(options)) {
    const ImageTransformOptions& t = opt_.transform;
    check(t.height > 0 && t.width > 0 && (t.channels == 1 || t.channels == 3),
          "ImageFolderDataset: a positive size and 1 or 3 channels");
    check(listing_.files.size() == listing_.labels.size(), "ImageFolderDataset: one label per file");
    const bool resized_crop = t.augment.resized_crop_min_scale > 0;
    stored_h_ = resized_crop ? 2 * t.height : t.height;
    stored_w_ = resized_crop ? 2 * t.width : t.width;
    decoded_whole_ = no_file_decoded(listing_.files.size());
    if (opt_.cache) {
        cache_ = std::make_unique<std::atomic<const Image*>[]>(listing_.files.size());
        for (size_t i = 0; i < listing_.files.size(); ++i) cache_[i].store(nullptr, std::memory_order_relaxed);
    }
}

ImageFolderDataset::~ImageFolderDataset() { clear_cache(); }

void ImageFolderDataset::clear_cache() {
    if (!cache_) return;
    for (size_t i = 0; i < listing_.files.size(); ++i) delete cache_[i].exchange(nullptr);
    cached_bytes_.store(0);
}

Shape ImageFolderDataset::sample_shape() const {
    return {opt_.transform.channels, opt_.transform.height, opt_.transform.width};
}

int64_t ImageFolderDataset::cache_bytes_when_full() const {
    return opt_.cache ? size() * int64_t{stored_h_} * stored_w_ * opt_.transform.channels : 0;
}

std::string ImageFolderDataset::description() const {
    std::string d = "image folder " + listing_.root + " (" + std::to_string(size()) + " images, " +
                    std::to_string(num_classes()) + " classes)";
    if (opt_.cache) {
        char buf[96];
        std::snprintf(buf, sizeof buf, ", cache of %.1f MiB when full", double(cache_bytes_when_full()) / 1048576.0);
        d += buf;
    }
    return d;
}

const Image& ImageFolderDataset::stored_image(int64_t index, Image& scratch) const {
    const auto i = static_cast<size_t>(index);
    if (cache_) {
        if (const Image* hit = cache_[i].load(std::memory_order_acquire)) return *hit;
    }
    DecodeScratch& s = t_scratch;
    const int c = opt_.transform.channels;
    FileStamp stamp;
    read_image_file(listing_.files[i], s.bytes, &stamp);
    // DCT scaling: a large JPEG decodes straight to the smallest scale at or above the stored size.
    decode_image_into(s.bytes, listing_.files[i], c, stored_h_, stored_w_, s.decoded);
    decoded_whole_[i].store(stamp_key(stamp), std::memory_order_relaxed);
    scratch = resize_image(s.decoded, stored_h_, stored_w_);
    if (!cache_) return scratch;
    auto* mine = new Image(std::move(scratch));
    const Image* expected = nullptr;
    if (cache_[i].compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) {
        cached_bytes_.fetch_add(image_bytes(*mine));
        return *mine;
    }
    delete mine;  // another thread cached the same (identical) image first
    return *expected;
}

float ImageFolderDataset::transform(int64_t index, float* x, Rng* rng) const {
    check(index >= 0 && index < size(), "ImageFolderDataset: index out of range");
    const auto i = static_cast<size_t>(index);
    if (cache_) {
        Image scratch;
        transform_image(stored_image(index, scratch), opt_.transform, rng, x);
    } else {
        // Straight from the file's bytes: a JPEG decodes at the DCT scale the target needs, and with a random
        // resized crop only the crop's box, at full resolution (decode_transform_image).
        // A file decoded to its end before (and unchanged since) is known good: a training read may stop after the
        // crop's last row. Any other read decodes it whole, so damage anywhere fails here, and it is then known.
        DecodeScratch& s = t_scratch;
        FileStamp stamp;
        read_image_file(listing_.files[i], s.bytes, &stamp);
        const uint64_t key = stamp_key(stamp);
        const bool known = decoded_key(i) == key;
        decode_transform_image(s.bytes, listing_.files[i], opt_.transform, rng, s.decoded, x,
                               known ? DecodeExtent::RegionRows : DecodeExtent::WholeFile);
        if (!known) decoded_whole_[i].store(key, std::memory_order_relaxed);
    }
    return static_cast<float>(listing_.labels[i]);
}

bool ImageFolderDataset::decoded_completely(int64_t index) const {
    check(index >= 0 && index < size(), "ImageFolderDataset: index out of range");
    const auto i = static_cast<size_t>(index);
    const uint64_t key = decoded_key(i);
    const FileStamp stamp = file_stamp(listing_.files[i]);
    return key != 0 && stamp.size >= 0 && stamp_key(stamp) == key;
}

float ImageFolderDataset::read(int64_t index, float* x) const { return transform(index, x, nullptr); }

float ImageFolderDataset::read_training(int64_t index, float* x, uint64_t draw_key) const {
    Rng rng(draw_key);
    return transform(index, x, &rng);
}

std::vector<int64_t> ImageFolderDataset::find_bad_files(int64_t begin, int64_t end, int workers,
                                                        std::vector<std::string>* reasons) const {
    begin = std::clamp<int64_t>(begin, 0, size());
    end = std::clamp<int64_t>(end, begin, size());
    const int64_t n = end - begin;
    const auto threads = static_cast<int>(std::clamp<int64_t>(workers, 1, std::max<int64_t>(n, 1)));
    std::vector<std::string> why(static_cast<size_t>(n));
    std::vector<std::exception_ptr> failures(static_cast<size_t>(threads));
    auto check_share = [&](int w) {
        try {
            Image scratch;
            for (int64_t i = begin + n * w / threads; i < begin + n * (w + 1) / threads; ++i) {
                try {
                    stored_image(i, scratch);
                } catch (const ImageDecodeError& e) {
                    why[static_cast<size_t>(i - begin)] = e.what();
                }
            }
        } catch (...) {
            failures[static_cast<size_t>(w)] = std::current_exception();
        }
    };
    std::vector<std::thread> helpers;
    for (int w = 1; w < threads; ++w) helpers.emplace_back(check_share, w);
    check_share(0);
    for (auto& t : helpers) t.join();
    for (const auto& f : failures)
        if (f) std::rethrow_exception(f);
    std::vector<int64_t> bad;
    for (int64_t i = 0; i < n; ++i)
        if (!why[static_cast<size_t>(i)].empty()) {
            bad.push_back(begin + i);
            if (reasons) reasons->push_back(std::move(why[static_cast<size_t>(i)]));
        }
    return bad;
}

void ImageFolderDataset::drop_files(std::span<const int64_t> bad) {
    if (bad.empty()) return;
    std::vector<bool> gone(listing_.files.size(), false);
    for (int64_t i : bad) {
        check(i >= 0 && i < size(), "ImageFolderDataset::drop_files: index out of range");
        gone[static_cast<size_t>(i)] = true;
    }
    ImageFolderListing kept;
    kept.root = listing_.root;
    kept.classes = listing_.classes;
    std::unique_ptr<std::atomic<const Image*>[]> cache;
    if (cache_) cache = std::make_unique<std::atomic<const Image*>[]>(listing_.files.size() - bad.size());
    auto decoded = no_file_decoded(listing_.files.size() - bad.size());
    size_t k = 0;
    for (size_t i = 0; i < listing_.files.size(); ++i) {
        if (gone[i]) {
            if (cache_) {
                const Image* im = cache_[i].exchange(nullptr);
                if (im) cached_bytes_.fetch_sub(image_bytes(*im));
                delete im;
            }
            continue;
        }
        kept.files.push_back(std::move(listing_.files[i]));
        kept.labels.push_back(listing_.labels[i]);
        if (cache_) cache[k].store(cache_[i].exchange(nullptr));
        decoded[k].store(decoded_key(i), std::memory_order_relaxed);
        ++k;
    }
    listing_ = std::move(kept);
    cache_ = std::move(cache);
    decoded_whole_ = std::move(decoded);
}

uint64_t ImageFolderDataset::fingerprint() const {
    uint64_t h = kFnv1aOffsetBasis;  // paths below the root: the root itself is compared as written (the config)
    for (size_t i = 0; i < listing_.files.size(); ++i) {
        const std::string& f = listing_.files[i];
        const size_t skip = f.compare(0, listing_.root.size(), listing_.root) == 0 ? listing_.root.size() : 0;
        h = fnv1a(f.data() + skip, f.size() - skip, h);
        h = fnv1a(&listing_.labels[i], sizeof listing_.labels[i], h);
    }
    // The sizes of 64 files spread over the set (a stat each: all of them could take minutes on a parallel file
    // system at ImageNet's 1.3M files): the same names in two generated or copied folders can hold other images.
    const size_t n = listing_.files.size(), k = std::min<size_t>(n, 64);
    for (size_t j = 0; j < k; ++j) {
        std::error_code ec;
        const uintmax_t bytes = std::filesystem::file_size(listing_.files[k == 1 ? 0 : j * (n - 1) / (k - 1)], ec);
        const uint64_t size = ec ? ~uint64_t{0} : static_cast<uint64_t>(bytes);
        h = fnv1a(&size, sizeof size, h);
    }
    return h;
}

}  // namespace ringtrain::data
