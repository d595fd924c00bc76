// Private to src/ops: the per-call-site caches of oneDNN entries (primitives, reorders, buffers) kept in a caller's
// Workspace, shared by the convolution and matmul paths. A call site sees a few shapes (training batch, evaluation,
// a last short batch; with sync.balance a few more as a rank's share moves); the cache is capped so that a caller
// cycling through many shapes cannot grow it without bound: when full, the entry used longest ago goes (it is
// rebuilt if its shape comes back).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "ringtrain/ops/workspace.hpp"

namespace ringtrain::ops::cpu::onednn {

// FNV-1a over a key's integers: the caches' hash.
inline size_t hash_mix(size_t h, int64_t v) { return (h ^ static_cast<size_t>(v)) * 1099511628211ull; }
constexpr size_t kHashSeed = 1469598103934665603ull;

template <class Key, class Entry, class Hash, size_t kMaxEntries>
struct EntryCache : WorkspaceCache {
    struct Slot {
        std::unique_ptr<Entry> entry;
        uint64_t last_use = 0;
    };
    std::unordered_map<Key, Slot, Hash> entries;
    uint64_t uses = 0;
    size_t primitives_made = 0;  // for tests: a steady step makes none

    // The entry for k; make() builds a missing one (a std::unique_ptr<Entry>).
    template <class Make>
    Entry& get(const Key& k, Make make) {
        const uint64_t now = ++uses;
        auto it = entries.find(k);
        if (it == entries.end()) {
            if (entries.size() >= kMaxEntries)
                entries.erase(std::min_element(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
                    return a.second.last_use < b.second.last_use;
                }));
            it = entries.emplace(k, Slot{make(), 0}).first;
        }
        it->second.last_use = now;
        return *it->second.entry;
    }

    // The cache of this type in ws, made there on first use (a Workspace belongs to one call site).
    static EntryCache& in(Workspace& ws) {
        auto* cache = dynamic_cast<EntryCache*>(ws.backend_cache().get());
        if (cache == nullptr) {
            ws.backend_cache() = std::make_unique<EntryCache>();
            cache = static_cast<EntryCache*>(ws.backend_cache().get());
        }
        return *cache;
    }
};

}  // namespace ringtrain::ops::cpu::onednn
