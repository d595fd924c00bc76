// The image-folder reader: scanning (class order, labels, extensions, every folder error), every bad-file case,
// data.skip_bad_files' validation pass, and through the loader: the same batches for the same seed whatever the
// worker count, cache on = cache off bitwise, N ranks reading disjoint shares. Folders are written at test time.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/image.hpp"
#include "ringtrain/data/image_folder.hpp"
#include "ringtrain/data/image_folder_generator.hpp"
#include "ringtrain/data/image_transform.hpp"
#include "ringtrain/data/sharded_loader.hpp"
#include "support/temp_dir.hpp"

using namespace ringtrain;
using namespace ringtrain::data;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) { return rt_test::named_temp_dir("rt_imgfolder_", name); }

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

Image picture(int h, int w, int c, uint64_t seed) {
    Rng rng(seed);
    return make_pattern_image(static_cast<int>(seed % 2), h, w, c, rng);
}

ImageFolderOptions options(int h, int w, bool augment = false, bool cache = false) {
    ImageFolderOptions o;
    o.transform.height = h;
    o.transform.width = w;
    o.transform.channels = 3;
    o.transform.mean = {0.5f, 0.4f, 0.3f};
    o.transform.stddev = {0.2f, 0.25f, 0.3f};
    if (augment) {
        o.transform.augment.hflip = true;
        o.transform.augment.random_crop_padding = 2;
    }
    o.cache = cache;
    return o;
}

// A generated 2-class folder of `per_class` images per class.
std::string pattern_folder(const std::string& name, int per_class, ImageFileFormat format = ImageFileFormat::Mixed,
                           int size = 20) {
    ImageFolderSpec spec;
    spec.out = fresh_dir(name);
    spec.per_class = per_class;
    spec.height = size;
    spec.width = size + 4;
    spec.format = format;
    spec.seed = 5;
    write_pattern_image_folder(spec);
    return spec.out;
}

using Samples = std::vector<std::vector<float>>;

// Every batch of `epochs` epochs of a Train-mode loader, flattened per batch.
Samples all_batches(const Dataset& ds, LoaderOptions o, int epochs) {
    ShardedLoader loader(ds, o);
    Samples out;
    for (int e = 0; e < epochs; ++e) {
        loader.start_epoch(e);
        Batch b;
        while (loader.next(b)) {
            out.emplace_back(b.x.data(), b.x.data() + b.x.numel());
            out.back().insert(out.back().end(), b.y.data(), b.y.data() + b.y.numel());
        }
    }
    return out;
}

LoaderOptions train_options(int64_t batch, int workers, int rank = 0, int world = 1) {
    LoaderOptions o;
    o.batch_size = batch;
    o.seed = 11;
    o.workers = workers;
    o.rank = rank;
    o.world = world;
    return o;
}

}  // namespace

TEST_CASE("classes are the sorted sub-folder names; files sorted, image extensions in any case", "[image][folder]") {
    const std::string root = fresh_dir("scan");
    const Image im = picture(8, 8, 3, 1);
    write_bytes(root + "/zebra/b.PNG", encode_png(im));
    write_bytes(root + "/zebra/a.jpeg", encode_jpeg(im));
    write_bytes(root + "/Apple/x.Jpg", encode_jpeg(im));
    write_bytes(root + "/Apple/deeper/y.bmp", encode_bmp(im));
    write_bytes(root + "/mango/p.ppm", encode_pnm(im));
    write_bytes(root + "/mango/q.pgm", encode_pnm(picture(8, 8, 1, 2)));
    write_bytes(root + "/mango/notes.txt", {1, 2, 3});       // not an image: ignored
    write_bytes(root + "/mango/.hidden.jpg", encode_jpeg(im));  // hidden: ignored
    write_bytes(root + "/.cache/z.jpg", encode_jpeg(im));       // hidden folder: not a class
    write_bytes(root + "/loose.jpg", encode_jpeg(im));          // outside any class folder: ignored
    const ImageFolderListing l = scan_image_folder(root, "data.train_dir");
    CHECK(l.classes == std::vector<std::string>{"Apple", "mango", "zebra"});  // byte order, as sorted() in Python
    const std::vector<std::string> want = {root + "/Apple/deeper/y.bmp", root + "/Apple/x.Jpg", root + "/mango/p.ppm",
                                           root + "/mango/q.pgm", root + "/zebra/a.jpeg", root + "/zebra/b.PNG"};
    CHECK(l.files == want);
    CHECK(l.labels == std::vector<int32_t>{0, 0, 1, 1, 2, 2});

    // The test split keeps the training labels, even when it lacks a class.
    const std::string test = fresh_dir("scan_test");
    write_bytes(test + "/zebra/t.png", encode_png(im));
    write_bytes(test + "/Apple/t.png", encode_png(im));
    const ImageFolderListing t = scan_image_folder(test, "data.test_dir", l.classes, root);
    CHECK(t.classes == l.classes);
    CHECK(t.labels == std::vector<int32_t>{0, 2});
}

TEST_CASE("folder errors name the folder: missing, a file, no classes, an empty class, a class only in test",
          "[image][folder]") {
    const std::string root = fresh_dir("errors");
    CHECK_THROWS_WITH(scan_image_folder(root + "/nope", "data.train_dir"),
                      Contains("data.train_dir: the folder '" + root + "/nope' does not exist"));
    write_bytes(root + "/file.jpg", encode_jpeg(picture(4, 4, 3, 1)));
    CHECK_THROWS_WITH(scan_image_folder(root + "/file.jpg", "data.train_dir"), Contains("is not a folder"));
    CHECK_THROWS_WITH(scan_image_folder(root, "data.train_dir"),
                      Contains("'" + root + "' has no class sub-folders"));
    fs::create_directories(root + "/a");
    write_bytes(root + "/b/x.png", encode_png(picture(4, 4, 3, 1)));
    write_bytes(root + "/a/readme.txt", {'h', 'i'});
    CHECK_THROWS_AS(scan_image_folder(root, "data.train_dir"), InputError);
    CHECK_THROWS_WITH(scan_image_folder(root, "data.train_dir"),
                      Contains("the class folder '" + root + "/a' holds no image"));
    fs::remove_all(root + "/a");
    const std::string test = fresh_dir("errors_test");
    write_bytes(test + "/b/y.png", encode_png(picture(4, 4, 3, 1)));
    write_bytes(test + "/c/y.png", encode_png(picture(4, 4, 3, 1)));
    CHECK_THROWS_WITH(scan_image_folder(test, "data.test_dir", {"b"}, root),
                      Contains("data.test_dir: the class folder '" + test + "/c' has no counterpart in the training "
                               "folder '" + root + "'"));
}

TEST_CASE("links to folders: a loop back to the class folder is refused naming the link; a folder reached twice is "
          "listed once", "[image][folder]") {
    const std::string root = fresh_dir("links");
    write_bytes(root + "/a/x.png", encode_png(picture(4, 4, 3, 1)));
    write_bytes(root + "/b/y.png", encode_png(picture(4, 4, 3, 2)));
    write_bytes(root + "/shared/z.png", encode_png(picture(4, 4, 3, 3)));
    fs::create_directory_symlink(root + "/shared", root + "/a/one");
    fs::create_directory_symlink(root + "/shared", root + "/a/two");
    fs::create_directory_symlink("../shared", root + "/b/far");  // a relative link
    // "shared" is a class of its own; "a" holds it twice through links (listed once), "b" once.
    const ImageFolderListing l = scan_image_folder(root, "data.train_dir");
    CHECK(l.classes == std::vector<std::string>{"a", "b", "shared"});
    CHECK(l.files == std::vector<std::string>{root + "/a/one/z.png", root + "/a/x.png", root + "/b/far/z.png",
                                              root + "/b/y.png", root + "/shared/z.png"});
    // A link to the data root from inside class a: every class's images would come back under a's label.
    fs::create_directory_symlink("..", root + "/a/up");
    CHECK_THROWS_WITH(scan_image_folder(root, "data.train_dir"),
                      Contains("data.train_dir: '" + root + "/a/up' links to") && Contains("(a loop); remove the link"));
    fs::remove(root + "/a/up");
    fs::create_directory_symlink(".", root + "/b/self");
    CHECK_THROWS_WITH(scan_image_folder(root, "data.train_dir"), Contains("'" + root + "/b/self' links to"));
}

TEST_CASE("links that lead nowhere are refused naming the link: an image's, a sub-folder's (the class loses "
          "them) and a class folder's (labels shift)", "[image][folder]") {
    const std::string root = fresh_dir("broken-links");
    write_bytes(root + "/a/x.png", encode_png(picture(4, 4, 3, 1)));
    write_bytes(root + "/b/y.png", encode_png(picture(4, 4, 3, 2)));
    const auto refused = [&](const std::string& link, const std::string& target) {
        CHECK_THROWS_WITH(scan_image_folder(root, "data.train_dir"),
                          Contains("data.train_dir: '" + root + link + "' is a link to '" + target +
                                   "' that leads nowhere (its target is gone); restore its target or remove it"));
        fs::remove(root + link);
    };
    fs::create_symlink(root + "/gone.jpg", root + "/a/zz.jpg");
    refused("/a/zz.jpg", root + "/gone.jpg");
    fs::create_directory_symlink(root + "/gone", root + "/a/more");  // a folder of images, named like none
    refused("/a/more", root + "/gone");
    fs::create_directory_symlink(root + "/gone", root + "/a0");  // sorts before "a": every label would shift
    refused("/a0", root + "/gone");
    fs::create_symlink("loop", root + "/b/loop");  // a link to itself: unreadable, not gone
    CHECK_THROWS_WITH(scan_image_folder(root, "data.train_dir"),
                      Contains("'" + root + "/b/loop' is a link to 'loop' that leads nowhere (") &&
                          !Contains("target is gone"));
    fs::remove(root + "/b/loop");
    CHECK(scan_image_folder(root, "data.train_dir").classes == std::vector<std::string>{"a", "b"});
}

TEST_CASE("a sample is transform_image of the decoded file resized to the target, with its class label",
          "[image][folder]") {
    const std::string root = fresh_dir("sample");
    const Image a = picture(24, 30, 3, 3);
    write_bytes(root + "/k/a.png", encode_png(a));
    ImageFolderDataset ds(scan_image_folder(root, "d"), options(12, 10));
    CHECK(ds.sample_shape() == Shape{3, 12, 10});
    std::vector<float> x(3 * 12 * 10), want(x.size());
    CHECK(ds.read(0, x.data()) == 0.0f);
    transform_image(resize_image(a, 12, 10), options(12, 10).transform, nullptr, want.data());
    CHECK(x == want);
}

TEST_CASE("bad files: corrupt, truncated and zero-byte files name the file; a PNG named .jpg and a grey file in an "
          "RGB folder read", "[image][folder]") {
    const std::string root = fresh_dir("bad");
    const Image rgb = picture(16, 16, 3, 4);
    const std::vector<uint8_t> jpeg = encode_jpeg(rgb);
    write_bytes(root + "/c/0_good.jpg", jpeg);
    std::vector<uint8_t> corrupt = jpeg;
    for (size_t i = corrupt.size() / 3; i < corrupt.size() - 2; ++i) corrupt[i] = static_cast<uint8_t>(i * 37);
    write_bytes(root + "/c/1_corrupt.jpg", corrupt);
    write_bytes(root + "/c/2_truncated.jpg", std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + jpeg.size() / 2));
    write_bytes(root + "/c/3_empty.png", {});
    write_bytes(root + "/c/4_png_named.jpg", encode_png(rgb));
    const Image grey = picture(16, 16, 1, 5);
    write_bytes(root + "/c/5_grey.png", encode_png(grey));
    write_bytes(root + "/c/6_text.bmp", {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
    ImageFolderDataset ds(scan_image_folder(root, "d"), options(16, 16));
    REQUIRE(ds.size() == 7);
    std::vector<float> x(3 * 16 * 16);
    CHECK_NOTHROW(ds.read(0, x.data()));
    for (int i : {1, 2, 3, 6}) {
        INFO(ds.file(i));
        CHECK_THROWS_AS(ds.read(i, x.data()), ImageDecodeError);
        CHECK_THROWS_WITH(ds.read(i, x.data()), Contains(ds.file(i)));
    }
    CHECK_NOTHROW(ds.read(0, x.data()));  // the same thread reads a good JPEG after the bad ones
    CHECK_NOTHROW(ds.read(4, x.data()));
    // Grey is replicated to RGB: after un-normalising, the three planes are equal.
    ds.read(5, x.data());
    const auto& t = options(16, 16).transform;
    for (int p = 0; p < 16 * 16; ++p) {
        const float r = x[p] * t.stddev[0] + t.mean[0], g = x[256 + p] * t.stddev[1] + t.mean[1],
                    b = x[512 + p] * t.stddev[2] + t.mean[2];
        REQUIRE(r == Approx(g).margin(1e-5));
        REQUIRE(r == Approx(b).margin(1e-5));
    }
    // The validation pass finds exactly the bad ones, in two shares as in one, and drops them.
    std::vector<std::string> why;
    const auto bad = ds.find_bad_files(0, ds.size(), 3, &why);
    CHECK(bad == std::vector<int64_t>{1, 2, 3, 6});
    REQUIRE(why.size() == 4);
    CHECK_THAT(why[2], Contains("3_empty.png"));
    auto first = ds.find_bad_files(0, 3, 1), second = ds.find_bad_files(3, 7, 2);
    first.insert(first.end(), second.begin(), second.end());
    CHECK(first == bad);
    ds.drop_files(bad);
    REQUIRE(ds.size() == 3);
    CHECK(ds.file(1) == root + "/c/4_png_named.jpg");
    for (int64_t i = 0; i < ds.size(); ++i) CHECK_NOTHROW(ds.read(i, x.data()));
}

TEST_CASE("the same seed gives the same batches, with 1 or 3 workers, prefetch or not; epochs differ",
          "[image][folder][loader]") {
    const std::string root = pattern_folder("workers", 12);
    ImageFolderDataset ds(scan_image_folder(root, "d"), options(16, 16, /*augment=*/true));
    REQUIRE(ds.reads_are_costly());
    const Samples one = all_batches(ds, train_options(6, 1), 2);
    REQUIRE(one.size() == 8);  // 24 images / batch 6, two epochs
    CHECK(all_batches(ds, train_options(6, 1), 2) == one);
    CHECK(all_batches(ds, train_options(6, 3), 2) == one);
    LoaderOptions no_prefetch = train_options(6, 3);
    no_prefetch.prefetch = false;
    CHECK(all_batches(ds, no_prefetch, 2) == one);
    // Epoch 1 shuffles and augments differently: no batch of it repeats one of epoch 0.
    for (int i = 0; i < 4; ++i)
        for (int j = 4; j < 8; ++j) CHECK(one[static_cast<size_t>(i)] != one[static_cast<size_t>(j)]);
    // Another seed, other batches.
    LoaderOptions other = train_options(6, 1);
    other.seed = 12;
    CHECK(all_batches(ds, other, 1) != Samples(one.begin(), one.begin() + 4));
}

TEST_CASE("a training read is augmented by its draw key alone; evaluation reads are not augmented",
          "[image][folder][loader]") {
    const std::string root = pattern_folder("draw", 2, ImageFileFormat::Png);
    ImageFolderDataset ds(scan_image_folder(root, "d"), options(16, 16, true));
    std::vector<float> a(3 * 16 * 16), b(a.size()), plain(a.size());
    // Some of these keys flip or shift: the sample is not the evaluation one for every key.
    ds.read(0, plain.data());
    bool any_differs = false;
    for (int64_t e = 0; e < 8; ++e) {
        const uint64_t key = augment_draw_key(11, e, 0);
        ds.read_training(0, a.data(), key);
        ds.read_training(0, b.data(), key);
        CHECK(a == b);
        any_differs = any_differs || a != plain;
    }
    CHECK(any_differs);
    CHECK(augment_draw_key(11, 0, 0) != augment_draw_key(11, 0, 1));
    CHECK(augment_draw_key(11, 0, 0) != augment_draw_key(11, 1, 0));
    CHECK(augment_draw_key(11, 0, 0) != augment_draw_key(12, 0, 0));
}

TEST_CASE("data.cache: cached samples are bitwise the uncached ones, and the cache reports its size",
          "[image][folder][cache]") {
    const std::string root = pattern_folder("cache", 8, ImageFileFormat::Mixed, 40);
    ImageFolderDataset plain(scan_image_folder(root, "d"), options(16, 16, true, false));
    ImageFolderDataset cached(scan_image_folder(root, "d"), options(16, 16, true, true));
    CHECK(plain.cache_bytes_when_full() == 0);
    CHECK(cached.cache_bytes_when_full() == 16 * 16 * 16 * 3);
    CHECK(cached.cache_bytes() == 0);
    const Samples want = all_batches(plain, train_options(4, 2), 2);
    CHECK(all_batches(cached, train_options(4, 2), 2) == want);  // the first epoch fills it, the second reads it
    CHECK(cached.cache_bytes() == cached.cache_bytes_when_full());
    // A cache filled by the validation pass serves the same samples too.
    ImageFolderDataset validated(scan_image_folder(root, "d"), options(16, 16, true, true));
    CHECK(validated.find_bad_files(0, validated.size(), 2).empty());
    CHECK(validated.cache_bytes() == validated.cache_bytes_when_full());
    CHECK(all_batches(validated, train_options(4, 1), 2) == want);

    // With random_resized_crop the cache keeps images at twice the target size; its samples are the same however
    // many workers read them.
    ImageFolderOptions rrc = options(16, 16, false, true);
    rrc.transform.augment.resized_crop_min_scale = 0.25f;
    rrc.transform.augment.resized_crop_max_scale = 1.0f;
    ImageFolderDataset big(scan_image_folder(root, "d"), rrc);
    CHECK(big.stored_height() == 32);
    CHECK(big.cache_bytes_when_full() == 16 * 32 * 32 * 3);
    const Samples crops = all_batches(big, train_options(4, 2), 1);
    CHECK(all_batches(big, train_options(4, 1), 1) == crops);
    rrc.cache = false;
    ImageFolderDataset big_plain(scan_image_folder(root, "d"), rrc);
    CHECK(all_batches(big_plain, train_options(4, 3), 1) == all_batches(big_plain, train_options(4, 1), 1));
}

TEST_CASE("N ranks read disjoint shares of each epoch, together the samples one rank reads", "[image][folder][loader]") {
    const std::string root = pattern_folder("ranks", 12, ImageFileFormat::Png);
    ImageFolderDataset ds(scan_image_folder(root, "d"), options(8, 8, true));
    // Identify samples by their index: read the loader's order through a rank-0 world-1 run at batch 6 and compare
    // with 3 ranks at batch 2 (same global batch): step s of rank r holds the same samples in the same order.
    const Samples whole = all_batches(ds, train_options(6, 1), 1);
    std::vector<Samples> per_rank;
    for (int r = 0; r < 3; ++r) per_rank.push_back(all_batches(ds, train_options(2, 2, r, 3), 1));
    const size_t n = 3 * 8 * 8;
    for (size_t s = 0; s < whole.size(); ++s)
        for (int r = 0; r < 3; ++r)
            for (int i = 0; i < 2; ++i) {
                const auto& mine = per_rank[static_cast<size_t>(r)][s];
                const auto& all = whole[s];
                const size_t k = static_cast<size_t>(r * 2 + i);
                // pixels, then the label
                REQUIRE(std::equal(mine.begin() + i * n, mine.begin() + (i + 1) * n, all.begin() + k * n));
                REQUIRE(mine[2 * n + i] == all[6 * n + k]);
            }
}

TEST_CASE("make-image-folder's patterns: names in label order, each class its own pattern", "[image][folder]") {
    CHECK(pattern_class_names(2) == std::vector<std::string>{"0_horizontal", "1_vertical"});
    CHECK_THROWS_AS(pattern_class_names(7), InputError);
    Rng rng(3);
    const Image h = make_pattern_image(0, 32, 32, 1, rng), v = make_pattern_image(1, 32, 32, 1, rng);
    // Horizontal stripes vary down a column more than along a row; vertical ones the other way round.
    auto variation = [](const Image& im, bool along_rows) {
        double s = 0;
        for (int y = 1; y < im.height; ++y)
            for (int x = 1; x < im.width; ++x) {
                const int a = im.pixels[size_t(y) * im.width + x];
                const int b = along_rows ? im.pixels[size_t(y) * im.width + x - 1] : im.pixels[size_t(y - 1) * im.width + x];
                s += std::abs(a - b);
            }
        return s;
    };
    CHECK(variation(h, false) > 2 * variation(h, true));
    CHECK(variation(v, true) > 2 * variation(v, false));
}

namespace {

// Records which thread read each sample and the draw key it got; optionally claims costly reads.
class RecordingDataset : public Dataset {
public:
    RecordingDataset(int64_t n, bool costly) : n_(n), costly_(costly), keys_(static_cast<size_t>(n)) {}
    int64_t size() const override { return n_; }
    Shape sample_shape() const override { return {1}; }
    int64_t num_classes() const override { return 2; }
    float read(int64_t index, float* x) const override {
        note_thread();
        x[0] = float(index);
        plain_reads++;
        return 0;
    }
    float read_training(int64_t index, float* x, uint64_t key) const override {
        keys_[static_cast<size_t>(index)] = key;
        note_thread();
        x[0] = float(index);
        return 0;
    }
    bool reads_are_costly() const override { return costly_; }
    std::string description() const override { return "recording"; }
    size_t threads() const {
        std::lock_guard<std::mutex> lk(mu_);
        return ids_.size();
    }
    uint64_t key(int64_t i) const { return keys_[static_cast<size_t>(i)]; }
    mutable std::atomic<int64_t> plain_reads{0};

private:
    // With costly reads, each read waits (up to 5 s) until `wait_for_threads_` threads have read something: the
    // loader's workers take samples one at a time, and on a loaded machine the caller's thread could otherwise read
    // the whole small batch before a helper wakes up.
    void note_thread() const {
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // a read that takes a while
        std::unique_lock<std::mutex> lk(mu_);
        ids_.insert(std::this_thread::get_id());
        seen_.notify_all();
        if (costly_) seen_.wait_for(lk, std::chrono::seconds(5), [this] { return ids_.size() >= wait_for_threads_; });
    }
    int64_t n_;
    bool costly_;
    mutable std::vector<uint64_t> keys_;
    mutable std::mutex mu_;
    mutable std::condition_variable seen_;
    mutable std::set<std::thread::id> ids_;

public:
    size_t wait_for_threads_ = 1;
};

}  // namespace

TEST_CASE("the loader splits even small batches over its workers when reads are costly, and passes draw keys",
          "[image][loader]") {
    for (const bool costly : {false, true}) {
        RecordingDataset ds(12, costly);  // one batch
        ds.wait_for_threads_ = 3;
        LoaderOptions o = train_options(12, 3);
        o.prefetch = false;
        ShardedLoader loader(ds, o);
        loader.start_epoch(2);
        Batch b;
        while (loader.next(b)) {
        }
        // 12 one-float samples a batch: far below the 1 M floats that make threads worth it for in-memory data.
        CHECK(ds.threads() == (costly ? 3u : 1u));
        for (int64_t i = 0; i < 12; ++i) CHECK(ds.key(i) == augment_draw_key(11, 2, i));
        CHECK(ds.plain_reads == 0);
    }
    // Evaluation reads are plain reads.
    RecordingDataset ds(10, true);
    LoaderOptions o = train_options(5, 2);
    o.mode = LoaderMode::Eval;
    ShardedLoader loader(ds, o);
    Batch b;
    while (loader.next(b)) {
    }
    CHECK(ds.plain_reads == 10);
}

TEST_CASE("with costly reads the prefetch probe never turns prefetch off", "[image][loader]") {
    // Every batch waits about a whole fill (the caller does nothing between batches): for in-memory data the probe
    // turns prefetch off after 32 batches; for decoding it would remove the only overlap, so it stays on.
    for (const bool costly : {false, true}) {
        RecordingDataset ds(40 * 4, costly);
        LoaderOptions o = train_options(4, 1);
        o.prefetch_probe_batches = 32;
        ShardedLoader loader(ds, o);
        Batch b;
        while (loader.next(b)) {
        }
        CHECK(loader.prefetching() == costly);
    }
}

TEST_CASE("a file decoded to its end once is known good: later training reads stop after the crop, with the same "
          "samples; a damaged or changed file is decoded whole", "[image][folder][jpeg]") {
    const std::string root = fresh_dir("known_good");
    const std::vector<uint8_t> jpeg = encode_jpeg(picture(240, 200, 3, 6), 90);
    const std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + jpeg.size() * 6 / 10);
    write_bytes(root + "/c/0_good.jpg", jpeg);
    write_bytes(root + "/c/1_cut.jpg", cut);
    write_bytes(root + "/c/2_cut_later.jpg", jpeg);
    write_bytes(root + "/c/3_same_stamp.jpg", jpeg);
    ImageFolderOptions o = options(24, 24);
    o.transform.augment.resized_crop_min_scale = 0.08f;
    o.transform.augment.resized_crop_max_scale = 1.0f;
    o.transform.augment.hflip = true;
    const ImageFolderListing listing = scan_image_folder(root, "d");
    ImageFolderDataset ds(listing, o);
    for (int64_t i = 0; i < ds.size(); ++i) CHECK_FALSE(ds.decoded_completely(i));
    std::vector<float> first(3 * 24 * 24), later(first.size());

    // The first read of a file decodes it whole; every later read of the same key gives the same sample, bit for bit.
    ds.read(0, first.data());
    CHECK(ds.decoded_completely(0));
    for (uint64_t key = 0; key < 12; ++key) {
        ImageFolderDataset fresh(listing, o);
        fresh.read_training(0, first.data(), key);
        ds.read_training(0, later.data(), key);
        CHECK(first == later);
    }

    // A truncated file fails on every read, whatever the crop, and never becomes known.
    for (uint64_t key = 0; key < 12; ++key) {
        CHECK_THROWS_WITH(ds.read_training(1, first.data(), key), Contains("1_cut.jpg"));
        CHECK_FALSE(ds.decoded_completely(1));
    }

    // A known file that is then truncated (its size changes) is decoded whole again, so it fails.
    ds.read_training(2, first.data(), 1);
    CHECK(ds.decoded_completely(2));
    write_bytes(root + "/c/2_cut_later.jpg", cut);
    CHECK_FALSE(ds.decoded_completely(2));
    for (uint64_t key = 0; key < 12; ++key) CHECK_THROWS_WITH(ds.read_training(2, first.data(), key), Contains("2_cut_later"));

    // The stamp (size and modification time) is what is trusted: damage that keeps both is found only by crops that
    // reach it. This shows that later reads of a known file do stop after the crop.
    const std::string same = root + "/c/3_same_stamp.jpg";
    ds.read(3, first.data());
    REQUIRE(ds.decoded_completely(3));
    const auto written = fs::last_write_time(same);
    std::vector<uint8_t> damaged = cut;
    damaged.resize(jpeg.size(), 0);
    write_bytes(same, damaged);
    fs::last_write_time(same, written);
    REQUIRE(ds.decoded_completely(3));
    int read_above_damage = 0;
    for (uint64_t key = 0; key < 12; ++key) {
        try {
            ds.read_training(3, first.data(), key);
            ++read_above_damage;
        } catch (const ImageDecodeError&) {
        }
    }
    CHECK(read_above_damage > 0);
    ImageFolderDataset fresh(listing, o);  // a new process would decode it whole: it fails whatever the crop
    for (uint64_t key = 0; key < 12; ++key) CHECK_THROWS_AS(fresh.read_training(3, first.data(), key), ImageDecodeError);

    // data.skip_bad_files' pass decodes every file whole: the good ones are known after it, and stay known (by file)
    // when the bad ones are dropped.
    write_bytes(same, jpeg);
    ImageFolderDataset checked(listing, o);
    CHECK(checked.find_bad_files(0, checked.size(), 2) == std::vector<int64_t>{1, 2});
    CHECK(checked.decoded_completely(0));
    CHECK(checked.decoded_completely(3));
    CHECK_FALSE(checked.decoded_completely(1));
    checked.drop_files(std::vector<int64_t>{1, 2});
    REQUIRE(checked.size() == 2);
    CHECK(checked.decoded_completely(0));
    CHECK(checked.decoded_completely(1));
}
