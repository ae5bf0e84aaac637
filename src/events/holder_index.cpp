#include "events/holder_index.h"

#include <algorithm>
#include <mutex>

namespace pagoda::events {

void HolderIndex::add(uint64_t hash, int32_t holder) {
  std::unique_lock lock(mutex_);
  if (auto m = multi_.find(hash); m != multi_.end()) {
    if (std::find(m->second.begin(), m->second.end(), holder) == m->second.end()) m->second.push_back(holder);
    return;
  }
  auto [s, inserted] = single_.emplace(hash, holder);
  if (inserted || s->second == holder) return;
  multi_.emplace(hash, std::vector<int32_t>{s->second, holder});
  single_.erase(s);
}

void HolderIndex::remove(uint64_t hash, int32_t holder) {
  std::unique_lock lock(mutex_);
  if (auto s = single_.find(hash); s != single_.end()) {
    if (s->second == holder) single_.erase(s);
    return;
  }
  auto m = multi_.find(hash);
  if (m == multi_.end()) return;
  std::vector<int32_t>& h = m->second;
  h.erase(std::remove(h.begin(), h.end(), holder), h.end());
  if (h.size() == 1) {
    single_.emplace(hash, h[0]);
    multi_.erase(m);
  }
}

template <typename F>
void HolderIndex::for_each_holder_locked(uint64_t hash, F f) const {
  if (auto s = single_.find(hash); s != single_.end()) {
    f(s->second);
  } else if (auto m = multi_.find(hash); m != multi_.end()) {
    for (int32_t h : m->second) f(h);
  }
}

void HolderIndex::match(std::span<const uint64_t> chain, std::span<int64_t> matched) const {
  std::fill(matched.begin(), matched.end(), 0);
  std::shared_lock lock(mutex_);
  // Before block j, matched[w] == j exactly for the holders of every block so far: block j
  // extends those of them that hold it too; when it extends none, nobody matches further.
  for (size_t j = 0; j < chain.size(); ++j) {
    const int64_t before = static_cast<int64_t>(j);
    bool extended = false;
    for_each_holder_locked(chain[j], [&](int32_t w) {
      if (w >= 0 && static_cast<size_t>(w) < matched.size() && matched[static_cast<size_t>(w)] == before) {
        matched[static_cast<size_t>(w)] = before + 1;
        extended = true;
      }
    });
    if (!extended) break;
  }
}

int64_t HolderIndex::num_hashes() const {
  std::shared_lock lock(mutex_);
  return static_cast<int64_t>(single_.size() + multi_.size());
}

int64_t HolderIndex::num_holders(uint64_t hash) const {
  std::shared_lock lock(mutex_);
  int64_t n = 0;
  for_each_holder_locked(hash, [&](int32_t) { ++n; });
  return n;
}

}  // namespace pagoda::events
