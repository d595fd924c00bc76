// bench_image_loader: training batches per second from an image folder through ShardedLoader with data.workers
// threads, the way the trainer reads them (random resized crop and flip, CHW floats), prefetch off so that the
// calling thread waits for every batch: the fill rate the workers reach together. Folders come from
// `bench_image_pipeline --make-folder`.
//   bench_image_loader --dir DIR --size H W [--workers W] [--batch B] [--batches K] [--cache]
// Prints one line: workers, batches, images/s, images/s per worker.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "ringtrain/data/image_folder.hpp"
#include "ringtrain/data/sharded_loader.hpp"

using namespace ringtrain;
using namespace ringtrain::data;

int main(int argc, char** argv) {
    std::string dir;
    int h = 224, w = 224, workers = 1;
    int64_t batch = 128, batches = 20;
    bool cache = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::cerr << "bench_image_loader: " << a << " needs a value\n";
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--dir") dir = next();
        else if (a == "--size") { h = std::stoi(next()); w = std::stoi(next()); }
        else if (a == "--workers") workers = std::stoi(next());
        else if (a == "--batch") batch = std::stoll(next());
        else if (a == "--batches") batches = std::stoll(next());
        else if (a == "--cache") cache = true;
        else {
            std::cerr << "usage: bench_image_loader --dir DIR --size H W [--workers W] [--batch B] [--batches K] [--cache]\n";
            return 2;
        }
    }
    if (dir.empty()) {
        std::cerr << "bench_image_loader: --dir is required\n";
        return 2;
    }
    try {
        ImageFolderOptions o;
        o.transform.height = h;
        o.transform.width = w;
        o.transform.channels = 3;
        o.transform.augment.hflip = true;
        o.transform.augment.resized_crop_min_scale = 0.08f;
        o.transform.augment.resized_crop_max_scale = 1.0f;
        o.cache = cache;
        ImageFolderDataset ds(scan_image_folder(dir, "--dir"), o);
        LoaderOptions lo;
        lo.batch_size = batch;
        lo.prefetch = false;
        lo.workers = workers;
        ShardedLoader loader(ds, lo);
        Batch b;
        int64_t epoch = 0, done = 0;
        loader.start_epoch(epoch);
        auto one = [&] {
            if (!loader.next(b)) {
                loader.start_epoch(++epoch);
                loader.next(b);
            }
        };
        one();  // the first batch allocates the buffers and warms the page cache
        const auto t0 = std::chrono::steady_clock::now();
        for (; done < batches; ++done) one();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double ips = static_cast<double>(done * batch) / s;
        std::printf("workers %d  batches %lld x %lld  %.0f images/s  %.0f per worker\n", workers,
                    static_cast<long long>(done), static_cast<long long>(batch), ips, ips / workers);
    } catch (const std::exception& e) {
        std::cerr << "bench_image_loader: " << e.what() << "\n";
        return 2;
    }
    return 0;
}
