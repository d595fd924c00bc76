// Scanning an image folder: classes and files in a fixed order (sorted), so every rank and every run numbers the
// samples alike, whatever order the file system lists them in.
#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/image_folder.hpp"

namespace ringtrain::data {

namespace fs = std::filesystem;

namespace {

// `p`, when a link, must lead somewhere: a target that is gone (or unreadable: a loop of links, no permission) is
// exit 2 naming the link, never a file or folder dropped without a word.
void check_link_target(const fs::path& p, const std::string& key) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec)) || fs::exists(p, ec)) return;
    const std::string why = ec ? ec.message() : "its target is gone";
    std::error_code read;
    throw InputError(key + ": '" + p.string() + "' is a link to '" + fs::read_symlink(p, read).string() +
                     "' that leads nowhere (" + why + "); restore its target or remove it");
}

bool hidden(const fs::path& p) {
    const std::string name = p.filename().string();
    return !name.empty() && name[0] == '.';
}

// True when `outer` is `inner` or one of its ancestors (both canonical).
bool holds(const fs::path& outer, const fs::path& inner) {
    auto o = outer.begin(), i = inner.begin();
    for (; o != outer.end() && i != inner.end(); ++o, ++i)
        if (*o != *i) return false;
    return o == outer.end();
}

// The image files below `dir` (recursively, following links to folders), sorted by path. A link back to the class
// folder or above it would list the files again and again until the OS stops the path (ELOOP), with the other
// classes' images under this class's label: refused, naming the link. A folder reached twice through links is
// listed once.
std::vector<std::string> images_below(const fs::path& dir, const std::string& key) {
    std::vector<std::string> files;
    std::error_code ec;
    const fs::path top = fs::canonical(dir, ec);
    if (ec) throw InputError(key + ": cannot read the folder '" + dir.string() + "': " + ec.message());
    std::set<fs::path> seen{top};
    fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec), end;
    if (ec) throw InputError(key + ": cannot read the folder '" + dir.string() + "': " + ec.message());
    for (; it != end; it.increment(ec)) {
        if (ec) throw InputError(key + ": cannot read the folder '" + dir.string() + "': " + ec.message());
        const fs::path& p = it->path();
        if (hidden(p)) {
            if (it->is_directory(ec)) it.disable_recursion_pending();
            continue;
        }
        if (it->is_directory(ec)) {
            const fs::path real = fs::canonical(p, ec);
            if (ec) throw InputError(key + ": cannot read the folder '" + p.string() + "': " + ec.message());
            if (holds(real, top))
                throw InputError(key + ": '" + p.string() + "' links to '" + real.string() + "', which holds the "
                                 "class folder '" + dir.string() + "' itself (a loop); remove the link");
            if (!seen.insert(real).second) it.disable_recursion_pending();
            continue;
        }
        // A link whose target cannot be reached is neither a file nor a folder: skipped, the class would lose an
        // image, or a folder of them, without a word.
        check_link_target(p, key);
        if (it->is_regular_file(ec) && image_type_of(p.filename().string())) files.push_back(p.string());
    }
    std::sort(files.begin(), files.end());
    return files;
}

}  // namespace

ImageFolderListing scan_image_folder(const std::string& root, const std::string& key) {
    ImageFolderListing l;
    l.root = root;
    std::error_code ec;
    if (!fs::exists(root, ec))
        throw InputError(key + ": the folder '" + root + "' does not exist; give a folder with one sub-folder of "
                         "images per class");
    if (!fs::is_directory(root, ec))
        throw InputError(key + ": '" + root + "' is not a folder; give a folder with one sub-folder of images per class");
    std::vector<fs::path> class_dirs;
    fs::directory_iterator it(root, ec), end;
    if (ec) throw InputError(key + ": cannot read the folder '" + root + "': " + ec.message());
    for (; it != end; it.increment(ec)) {
        if (ec) throw InputError(key + ": cannot read the folder '" + root + "': " + ec.message());
        if (hidden(it->path())) continue;
        // A class folder reached through a link whose target cannot be reached would drop the class and shift the
        // labels of every class after it.
        check_link_target(it->path(), key);
        if (it->is_directory(ec)) class_dirs.push_back(it->path());
    }
    if (class_dirs.empty())
        throw InputError(key + ": the folder '" + root + "' has no class sub-folders (and so no image); put each "
                         "class's images in a sub-folder named after it");
    // torchvision's rule: classes are the sub-folder names in sorted order, labels their positions.
    std::sort(class_dirs.begin(), class_dirs.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
    for (const fs::path& dir : class_dirs) {
        std::vector<std::string> files = images_below(dir, key);
        if (files.empty())
            throw InputError(key + ": the class folder '" + dir.string() + "' holds no image (.jpg .jpeg .png .ppm "
                             ".pgm .bmp); add images or remove the folder");
        const auto label = static_cast<int32_t>(l.classes.size());
        l.classes.push_back(dir.filename().string());
        l.labels.insert(l.labels.end(), files.size(), label);
        l.files.insert(l.files.end(), std::make_move_iterator(files.begin()), std::make_move_iterator(files.end()));
    }
    return l;
}

ImageFolderListing scan_image_folder(const std::string& root, const std::string& key,
                                     const std::vector<std::string>& train_classes, const std::string& train_root) {
    ImageFolderListing l = scan_image_folder(root, key);
    std::vector<int32_t> to_train(l.classes.size());
    for (size_t c = 0; c < l.classes.size(); ++c) {
        const auto at = std::find(train_classes.begin(), train_classes.end(), l.classes[c]);
        if (at == train_classes.end())
            throw InputError(key + ": the class folder '" + (fs::path(root) / l.classes[c]).string() +
                             "' has no counterpart in the training folder '" + train_root +
                             "'; the test classes must be training classes (rename or remove it)");
        to_train[c] = static_cast<int32_t>(at - train_classes.begin());
    }
    for (int32_t& label : l.labels) label = to_train[static_cast<size_t>(label)];
    l.classes = train_classes;
    return l;
}

}  // namespace ringtrain::data
