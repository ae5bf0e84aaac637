#include "kvcache/cache_pins.h"

#include <algorithm>

namespace pagoda::kvcache {

CachePins::CachePins(BlockManager& blocks, int64_t max_pinned_blocks)
    : blocks_(blocks),
      max_pinned_blocks_(max_pinned_blocks),
      held_(static_cast<size_t>(blocks.pool().num_blocks()), 0) {
  CHECK(max_pinned_blocks >= 0 && max_pinned_blocks <= blocks.pool().num_blocks())
      << "max_pinned_blocks " << max_pinned_blocks << " of " << blocks.pool().num_blocks();
}

void CachePins::hold(const PrefixMatch& m, int delta) {
  for (int32_t b : m.blocks()) {
    const int32_t before = held_[b];
    held_[b] += delta;
    CHECK_GE(held_[b], 0) << "block " << b;
    if (before == 0 && held_[b] > 0) ++num_pinned_blocks_;
    if (before > 0 && held_[b] == 0) --num_pinned_blocks_;
  }
}

int64_t CachePins::blocks_to_add(std::span<const int32_t> tokens, const KvNamespace& ns) const {
  const int64_t bs = blocks_.pool().layout().block_size;
  const int64_t full = static_cast<int64_t>(tokens.size()) / bs;
  std::vector<int32_t> chain;
  blocks_.index().match(tokens, ns, full, blocks_.hash_fn(), chain);
  int64_t held = 0;
  for (int32_t b : chain) held += held_[b] > 0 ? 1 : 0;
  return full - held;
}

const CachePin* CachePins::find(int64_t id) const {
  auto it = std::lower_bound(pins_.begin(), pins_.end(), id,
                             [](const std::unique_ptr<CachePin>& p, int64_t v) { return p->id < v; });
  return it != pins_.end() && (*it)->id == id ? it->get() : nullptr;
}

const CachePin* CachePins::find(std::span<const int32_t> tokens, const KvNamespace& ns) const {
  return lookup(tokens, ns);
}

CachePin* CachePins::lookup(std::span<const int32_t> tokens, const KvNamespace& ns) const {
  for (const auto& p : pins_) {
    if (p->ns == ns && std::equal(p->tokens.begin(), p->tokens.end(), tokens.begin(), tokens.end())) return p.get();
  }
  return nullptr;
}

Result<const CachePin*> CachePins::pin(const CachePinSpec& spec, int64_t now_ns, bool* refreshed) {
  CHECK_GE(spec.ttl_ns, 0);
  if (refreshed != nullptr) *refreshed = false;
  PrefixMatch match = blocks_.pin_prefix(spec.tokens, spec.ns);
  if (match.empty()) {
    return Status::not_found("no full block of the prompt is cached (" + std::to_string(spec.tokens.size()) +
                             " tokens, blocks of " + std::to_string(blocks_.pool().layout().block_size) + ")");
  }
  if (CachePin* existing = lookup(spec.tokens, spec.ns); existing != nullptr) {
    CachePin& p = *existing;
    if (match.num_blocks() > p.match.num_blocks()) {  // more of it is cached now: hold that
      int64_t added = 0;
      for (int32_t b : match.blocks()) added += held_[b] > 0 ? 0 : 1;
      if (num_pinned_blocks_ + added <= max_pinned_blocks_) {
        hold(match, +1);
        hold(p.match, -1);
        p.match = std::move(match);
      }
    }
    p.created_ns = now_ns;
    p.ttl_ns = spec.ttl_ns;
    p.label = spec.label.empty() ? p.label : spec.label;
    if (p.ttl_ns > 0 && (next_expiry_ns_ == 0 || p.expires_ns() < next_expiry_ns_)) next_expiry_ns_ = p.expires_ns();
    if (refreshed != nullptr) *refreshed = true;
    return &p;
  }
  int64_t added = 0;
  for (int32_t b : match.blocks()) added += held_[b] > 0 ? 0 : 1;
  if (num_pinned_blocks_ + added > max_pinned_blocks_) {
    return Status::resource_exhausted(
        "pinning this prompt would hold " + std::to_string(num_pinned_blocks_ + added) + " KV blocks, above the " +
        std::to_string(max_pinned_blocks_) + " of " + std::to_string(blocks_.pool().num_blocks()) +
        " that pins may hold (" + std::to_string(num_pinned_blocks_) +
        " are pinned now); unpin something or raise --max-pinned-share");
  }  // `match` unpins
  auto p = std::make_unique<CachePin>();
  p->id = next_id_++;
  p->tokens.assign(spec.tokens.begin(), spec.tokens.end());
  p->ns = spec.ns;
  p->cache_salt = spec.cache_salt;
  p->client_salt = spec.client_salt;
  p->owner = spec.owner;
  p->label = spec.label;
  p->created_ns = now_ns;
  p->ttl_ns = spec.ttl_ns;
  p->match = std::move(match);
  hold(p->match, +1);
  if (p->ttl_ns > 0 && (next_expiry_ns_ == 0 || p->expires_ns() < next_expiry_ns_)) next_expiry_ns_ = p->expires_ns();
  pins_.push_back(std::move(p));  // ids ascend
  return pins_.back().get();
}

void CachePins::drop(size_t index) {
  hold(pins_[index]->match, -1);
  pins_.erase(pins_.begin() + static_cast<std::ptrdiff_t>(index));  // its match unpins
}

bool CachePins::unpin(int64_t id) {
  for (size_t i = 0; i < pins_.size(); ++i) {
    if (pins_[i]->id == id) {
      drop(i);
      return true;
    }
  }
  return false;
}

int64_t CachePins::expire(int64_t now_ns) {
  if (next_expiry_ns_ == 0 || now_ns < next_expiry_ns_) return 0;
  int64_t n = 0;
  next_expiry_ns_ = 0;
  for (size_t i = 0; i < pins_.size();) {
    const int64_t at = pins_[i]->expires_ns();
    if (at > 0 && at <= now_ns) {
      drop(i);
      ++n;
      continue;
    }
    if (at > 0 && (next_expiry_ns_ == 0 || at < next_expiry_ns_)) next_expiry_ns_ = at;
    ++i;
  }
  num_expired_ += n;
  return n;
}

void CachePins::clear() {
  while (!pins_.empty()) drop(pins_.size() - 1);
  next_expiry_ns_ = 0;
}

void CachePins::check_integrity() const {
  std::vector<int32_t> held(held_.size(), 0);
  int64_t earliest = 0;
  for (size_t i = 0; i < pins_.size(); ++i) {
    const CachePin& p = *pins_[i];
    CHECK(i == 0 || pins_[i - 1]->id < p.id) << "pins out of id order";
    CHECK(!p.match.empty()) << "pin " << p.id << " holds no block";
    CHECK(p.match.ns() == p.ns) << "pin " << p.id;
    const int64_t bs = blocks_.pool().layout().block_size;
    CHECK_LE(p.match.num_tokens(), static_cast<int64_t>(p.tokens.size())) << "pin " << p.id;
    for (int64_t j = 0; j < p.match.num_blocks(); ++j) {
      const int32_t b = p.match.blocks()[static_cast<size_t>(j)];
      ++held[b];
      CHECK(blocks_.index().contains(b)) << "pin " << p.id << " holds unregistered block " << b;
      const auto stored = blocks_.index().tokens(b);
      CHECK(std::equal(stored.begin(), stored.end(), p.tokens.begin() + j * bs)) << "pin " << p.id << " block " << b;
    }
    if (p.ttl_ns > 0 && (earliest == 0 || p.expires_ns() < earliest)) earliest = p.expires_ns();
  }
  int64_t distinct = 0;
  for (size_t b = 0; b < held.size(); ++b) {
    CHECK_EQ(held[b], held_[b]) << "block " << b;
    CHECK_GE(blocks_.pin_count(static_cast<int32_t>(b)), held[b]) << "block " << b;
    distinct += held[b] > 0 ? 1 : 0;
  }
  CHECK_EQ(distinct, num_pinned_blocks_);
  CHECK_LE(num_pinned_blocks_, max_pinned_blocks_);
  CHECK(earliest == 0 || (next_expiry_ns_ != 0 && next_expiry_ns_ <= earliest)) << "a pin expires before the next check";
}

}  // namespace pagoda::kvcache
