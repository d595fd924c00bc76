// IDX reader (MNIST / Fashion-MNIST): gzip or plain files through zlib, strict header and size checks.
#include "ringtrain/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

#include "idx_dataset.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kInstallHint =
    "install Debian's dataset-fashion-mnist (files in /usr/share/datasets/fashion-mnist) or set data.dir "
    "to a folder holding the IDX files";

std::string dims_string(const std::vector<int64_t>& dims) {
    std::string s;
    for (size_t i = 0; i < dims.size(); ++i) {
        if (i) s += 'x';
        s += std::to_string(dims[i]);
    }
    return s;
}

std::string hex(uint32_t v, int digits) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%0*X", digits, v);
    return buf;
}
std::string hex32(uint32_t v) { return hex(v, 8); }

struct GzFile {
    gzFile f = nullptr;
    ~GzFile() {
        if (f) gzclose(f);
    }
};

// Reads up to n bytes; returns how many were read. Throws on a corrupt stream; a stream that ends early
// (plain or gzip) just returns a short count so the caller can report truncation.
int64_t read_bytes(gzFile f, const std::string& path, uint8_t* dst, int64_t n) {
    int64_t got = 0;
    while (got < n) {
        const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - got, 1 << 30));
        const int r = gzread(f, dst + got, chunk);
        if (r < 0) {
            int code = Z_OK;
            const char* msg = gzerror(f, &code);
            if (code == Z_BUF_ERROR) break;  // "unexpected end of file": a truncated .gz
            if (code == Z_ERRNO)
                throw InputError(path + ": read error: " + std::strerror(errno) + "; check the file and the disk");
            throw InputError(path + ": corrupt gzip data (" + std::string(msg ? msg : "unknown zlib error") +
                             "); re-download the file or point data.dir at a good copy");
        }
        if (r == 0) break;
        got += r;
    }
    return got;
}

}  // namespace

IdxArray read_idx_file(const std::string& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw InputError(path + ": not found; " + kInstallHint);
    if (fs::is_directory(path, ec))
        throw InputError(path + ": is a directory, not an IDX file; point data.dir at the folder and let it pick "
                                "the files");

    GzFile g;
    g.f = gzopen(path.c_str(), "rb");
    if (!g.f)
        throw InputError(path + ": cannot open: " + std::strerror(errno ? errno : EIO) +
                         "; check the file's permissions");
    gzbuffer(g.f, 1 << 18);

    uint8_t header[4];
    const int64_t hn = read_bytes(g.f, path, header, 4);
    if (hn < 4)
        throw InputError(path + ": truncated: the file holds " + std::to_string(hn) +
                         " bytes, fewer than the 4-byte IDX magic number; re-download or point data.dir at a "
                         "complete copy");
    const uint32_t magic = (uint32_t(header[0]) << 24) | (uint32_t(header[1]) << 16) | (uint32_t(header[2]) << 8) |
                           uint32_t(header[3]);
    if (header[0] != 0 || header[1] != 0 || header[3] < 1 || header[3] > 4)
        throw InputError(path + ": wrong magic number " + hex32(magic) +
                         " (an IDX file of unsigned bytes starts with 0x00000801 for labels or 0x00000803 for "
                         "images); is this an MNIST/Fashion-MNIST IDX file, gzip'd or plain?");
    if (header[2] != 0x08)
        throw InputError(path + ": magic number " + hex32(magic) + " declares element type " +
                         hex(header[2], 2) +
                         ", but only unsigned bytes (type 0x08, magic 0x0000080N) are supported; "
                         "use the ubyte IDX files of MNIST/Fashion-MNIST");
    const int ndims = header[3];

    IdxArray out;
    uint8_t dimbuf[16];
    const int64_t dn = read_bytes(g.f, path, dimbuf, 4 * ndims);
    if (dn < 4 * ndims)
        throw InputError(path + ": truncated: magic " + hex32(magic) + " announces " + std::to_string(ndims) +
                         " dimensions but the file ends inside the header; re-download or point data.dir at a "
                         "complete copy");
    int64_t total = 1;
    for (int i = 0; i < ndims; ++i) {
        const uint8_t* p = dimbuf + 4 * i;
        const int64_t d = (int64_t(p[0]) << 24) | (int64_t(p[1]) << 16) | (int64_t(p[2]) << 8) | int64_t(p[3]);
        out.dims.push_back(d);
        if (d != 0 && total > std::numeric_limits<int64_t>::max() / 4 / d)
            throw InputError(path + ": header declares an impossible size " + dims_string(out.dims) +
                             "; the file is corrupt, re-download it");
        total *= d;
    }
    const std::string decl = "header says " + dims_string(out.dims) + " = " + std::to_string(total) + " bytes";

    // Read in chunks, growing the buffer as data arrives, so a corrupt header cannot force one huge allocation.
    int64_t got = 0;
    while (got < total) {
        const int64_t chunk = std::min<int64_t>(total - got, int64_t(1) << 26);
        out.values.resize(static_cast<size_t>(got + chunk));
        const int64_t r = read_bytes(g.f, path, out.values.data() + got, chunk);
        got += r;
        if (r < chunk) break;
    }
    if (got < total)
        throw InputError(path + ": truncated: " + decl + " but the file holds " + std::to_string(got) + " bytes" +
                         (gzdirect(g.f) ? "" : " (after decompression)") +
                         "; re-download or point data.dir at a complete copy");
    uint8_t extra;
    if (read_bytes(g.f, path, &extra, 1) != 0)
        throw InputError(path + ": " + decl +
                         " but the file holds more data after them; it is not a valid IDX file (wrong or "
                         "concatenated download?), re-download it");
    return out;
}

namespace {

// "<dir>/<stem>" or "<dir>/<stem>.gz", whichever exists (plain first).
std::string find_idx(const fs::path& dir, const std::string& stem) {
    std::error_code ec;
    const fs::path plain = dir / stem;
    const fs::path gz = dir / (stem + ".gz");
    if (fs::exists(plain, ec)) return plain.string();
    if (fs::exists(gz, ec)) return gz.string();
    throw InputError(plain.string() + "[.gz]: not found (looked for " + stem + " and " + stem + ".gz in " +
                     dir.string() + "); " + kInstallHint);
}

}  // namespace

std::unique_ptr<Dataset> load_idx_dataset(const std::string& dir, Split split, const Normalization& norm) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        throw InputError(dir + ": " + (fs::exists(dir, ec) ? "is not a directory" : "data directory not found") +
                         "; " + kInstallHint);
    }
    if (!(norm.stddev > 0.0f))
        throw InputError("data normalization: stddev must be > 0 (got " + std::to_string(norm.stddev) + ")");
    const std::string prefix = split == Split::Train ? "train" : "t10k";
    const std::string images_path = find_idx(dir, prefix + "-images-idx3-ubyte");
    const std::string labels_path = find_idx(dir, prefix + "-labels-idx1-ubyte");

    IdxArray images = read_idx_file(images_path);
    if (images.dims.size() != 3)
        throw InputError(images_path + ": holds a " + std::to_string(images.dims.size()) +
                         "-dimensional array (magic 0x0000080" + std::to_string(images.dims.size()) +
                         "), but an image file must be 3-dimensional (count x rows x cols, magic 0x00000803); "
                         "did the images and labels files get swapped?");
    IdxArray labels = read_idx_file(labels_path);
    if (labels.dims.size() != 1)
        throw InputError(labels_path + ": holds a " + std::to_string(labels.dims.size()) +
                         "-dimensional array, but a label file must be 1-dimensional (magic 0x00000801); "
                         "did the images and labels files get swapped?");
    if (labels.dims[0] != images.dims[0])
        throw InputError(labels_path + ": label count mismatch: it holds " + std::to_string(labels.dims[0]) +
                         " labels but " + images_path + " holds " + std::to_string(images.dims[0]) +
                         " images; both files must come from the same download");
    if (images.dims[0] == 0) throw InputError(images_path + ": holds no images; re-download it");

    return std::make_unique<IdxDataset>(dir, split, images_path, std::move(images), std::move(labels), norm);
}

}  // namespace ringtrain::data
