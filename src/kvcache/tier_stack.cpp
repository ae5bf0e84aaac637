// TierStack: the policy is at the top of kvcache/tier_stack.h and kvcache/tier.h.
#include "kvcache/tier_stack.h"

#include <algorithm>

#include "core/check.h"

namespace pagoda::kvcache {

std::string_view offload_mode_name(OffloadMode mode) {
  return mode == OffloadMode::kWriteThrough ? "write-through" : "write-back";
}

std::optional<OffloadMode> offload_mode_from_name(std::string_view name) {
  if (name == "write-back") return OffloadMode::kWriteBack;
  if (name == "write-through") return OffloadMode::kWriteThrough;
  return std::nullopt;
}

void chain_hashes(BlockHashFn hash_fn, BlockHash parent, std::span<const int32_t> tokens, int64_t block_size,
                  uint64_t namespace_key, std::vector<BlockHash>& out) {
  out.clear();
  const int64_t n = static_cast<int64_t>(tokens.size()) / block_size;
  for (int64_t i = 0; i < n; ++i) {
    parent = hash_fn(parent, tokens.subspan(static_cast<size_t>(i * block_size), static_cast<size_t>(block_size)),
                     namespace_key);
    out.push_back(parent);
  }
}

void LatencyBuckets::observe(double seconds) {
  size_t b = 0;
  while (b < kBounds.size() && seconds > kBounds[b]) ++b;
  ++buckets[b];
  sum += seconds;
  ++count;
}

TierStack::TierStack(BlockPool& pool, OffloadMode offload, const Clock& clock, const Logger& logger)
    : pool_(pool), offload_(offload), clock_(clock), logger_(logger), puts_by_block_(static_cast<size_t>(pool.num_blocks())) {}

TierStack::~TierStack() {
  // Lowest tier first: an upper tier's destructor may no longer demote into a gone one.
  for (Level& level : tiers_) {
    level.tier->set_eviction_callback(nullptr);
    level.tier->set_removed_callback(nullptr);
  }
  while (!tiers_.empty()) tiers_.pop_back();
}

void TierStack::add_tier(std::unique_ptr<Tier> tier, bool write_through) {
  CHECK(tier != nullptr);
  CHECK_LT(tiers_.size(), static_cast<size_t>(kMaxTiers)) << "too many tiers";
  const int index = static_cast<int>(tiers_.size());
  Level level;
  level.tier = std::move(tier);
  level.write_through = write_through;
  tiers_.push_back(std::move(level));
  tiers_.back().completions.reserve(64);
  tiers_.back().tier->set_removed_callback([this, index](BlockHash hash) { announce_removed(index, hash); });
  // Victims of tier i go to tier i + 1 (set for the tier above once this one exists).
  if (index > 0) {
    const int above = index - 1;
    tiers_[static_cast<size_t>(above)].tier->set_eviction_callback(
        [this, above](const BlockRecordView& record, int32_t priority) { demote(above, record, priority); });
  }
}

// ---- offload and demotion ----

std::optional<TierOpId> TierStack::put_to(int tier, std::span<const TierPut> puts, bool demotion) {
  Level& level = tiers_[static_cast<size_t>(tier)];
  if (!level.tier->enabled()) {
    note_disabled(tier);
    count_dropped(tier, static_cast<int64_t>(puts.size()), Status::unavailable("the tier is disabled"));
    return std::nullopt;
  }
  const TierOpId op = level.tier->put(puts);
  routes_[route_key(tier, op)] = Route{Route::kPut, 0, 0};
  if (listener_ != nullptr) record_store(tier, op, puts);
  ++num_puts_in_flight_;
  (demotion ? level.counters.demoted_blocks : level.counters.offloaded_blocks) += static_cast<int64_t>(puts.size());
  return op;
}

void TierStack::count_dropped(int tier, int64_t blocks, const Status& why) {
  if (blocks <= 0) return;
  Level& level = tiers_[static_cast<size_t>(tier)];
  level.counters.dropped_writes += blocks;
  if (level.counters.dropped_writes < level.next_drop_log) return;
  while (level.next_drop_log <= level.counters.dropped_writes) level.next_drop_log *= 2;
  logger_.warn("kv tier " + std::string(level.tier->name()) + ": " + std::to_string(level.counters.dropped_writes) +
               " blocks not stored so far (pagoda_kv_tier_dropped_writes_total); the latest: " + why.message());
}

void TierStack::demote(int from_tier, const BlockRecordView& record, int32_t priority) {
  const int to = from_tier + 1;
  if (to >= num_tiers()) return;  // the bottom tier drops its victims
  Level& from = tiers_[static_cast<size_t>(from_tier)];
  from.demote_payload.assign(1, record.payload);
  from.demote_puts.assign(1, TierPut{record.meta, record.tokens, from.demote_payload, priority});
  put_to(to, from.demote_puts, /*demotion=*/true);
}

void TierStack::put_blocks(int tier, std::span<const BlockInfo> blocks) {
  put_pool_blocks(tier, blocks, /*keep=*/false, 0);
}

void TierStack::put_pool_blocks(int tier, std::span<const BlockInfo> blocks, bool keep, int attempt) {
  if (blocks.empty() || tier >= num_tiers()) return;
  const size_t per_block = static_cast<size_t>(2 * pool_.layout().n_layer);
  segments_.resize(blocks.size() * per_block);
  const_segments_.resize(segments_.size());
  puts_.clear();
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockInfo& b = blocks[i];
    const std::span<ByteSpan> segs(segments_.data() + i * per_block, per_block);
    pool_.block_segments(b.block, segs);
    for (size_t s = 0; s < per_block; ++s) const_segments_[i * per_block + s] = segs[s];
    BlockRecordMeta meta = record_meta_for(pool_.layout());
    meta.ns = b.ns;
    meta.block_hash = b.hash;
    meta.parent_hash = b.parent_hash;
    puts_.push_back(TierPut{meta, b.tokens, std::span<const ConstByteSpan>(const_segments_.data() + i * per_block, per_block),
                            b.priority});
  }
  const std::optional<TierOpId> op = put_to(tier, puts_, /*demotion=*/false);
  if (!op) return;
  PoolPut& p = pool_puts_[route_key(tier, *op)];
  p.keep = keep;
  p.attempt = attempt;
  const size_t bs = static_cast<size_t>(pool_.layout().block_size);
  p.blocks.tokens.resize(blocks.size() * bs);
  p.blocks.blocks.clear();
  const uint64_t key = route_key(tier, *op);
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::copy(blocks[i].tokens.begin(), blocks[i].tokens.end(), p.blocks.tokens.begin() + static_cast<std::ptrdiff_t>(i * bs));
    BlockInfo b = blocks[i];
    b.tokens = std::span<const int32_t>(p.blocks.tokens).subspan(i * bs, bs);
    p.blocks.blocks.push_back(b);
    puts_by_block_[static_cast<size_t>(b.block)].push_back(PutRef{key, static_cast<uint32_t>(i)});
  }
}

void TierStack::finish_pool_put(int tier, const TierCompletion& c) {
  auto it = pool_puts_.find(route_key(tier, c.op));
  if (it == pool_puts_.end()) {  // a demotion: the tier above gave the block up already
    count_dropped(tier, c.num_items - c.num_ok, c.status);
    return;
  }
  PoolPut& p = it->second;
  const bool busy = c.status.code() == StatusCode::kUnavailable;
  int64_t dropped = 0;
  const auto n = std::min<int64_t>(c.num_items, static_cast<int64_t>(p.blocks.blocks.size()));
  for (int64_t i = c.num_ok; i < n; ++i) {
    const BlockInfo& b = p.blocks.blocks[static_cast<size_t>(i)];
    if (b.block == kRemovedInFlight) continue;  // evicted meanwhile: put again at its eviction
    if (!p.keep || !busy || p.attempt >= kMaxPutRetries) {
      ++dropped;
      continue;
    }
    Retry& r = retries_.emplace_back();
    r.tier = tier;
    r.attempt = p.attempt + 1;
    r.tokens.assign(b.tokens.begin(), b.tokens.end());
    r.info = b;
    r.info.tokens = r.tokens;
  }
  count_dropped(tier, dropped, c.status);
  for (const BlockInfo& b : p.blocks.blocks) {  // the put leaves the per-block index
    if (b.block == kRemovedInFlight) continue;   // left it at its eviction
    std::erase_if(puts_by_block_[static_cast<size_t>(b.block)], [&](const PutRef& r) { return r.key == it->first; });
  }
  pool_puts_.erase(it);
}

void TierStack::retry_puts() {
  if (retries_.empty()) return;
  for (int t = 0; t < num_tiers(); ++t) {
    Level& level = tiers_[static_cast<size_t>(t)];
    if (!level.put_completed && num_puts_in_flight_ > 0) continue;  // nothing freed since the last try
    level.put_completed = false;
    retry_scratch_.clear();
    int attempt = 0;
    for (const Retry& r : retries_) {
      if (r.tier != t) continue;
      retry_scratch_.push_back(r.info);
      attempt = std::max(attempt, r.attempt);
    }
    if (retry_scratch_.empty()) continue;
    level.counters.retried_writes += static_cast<int64_t>(retry_scratch_.size());
    put_pool_blocks(t, retry_scratch_, /*keep=*/true, attempt);  // copies the tokens before they go
    std::erase_if(retries_, [t](const Retry& r) { return r.tier == t; });
  }
}

void TierStack::on_blocks_stored(std::span<const BlockInfo> chain) {
  for (int t = 0; t < num_tiers(); ++t) {
    if (offload_ == OffloadMode::kWriteThrough || tiers_[static_cast<size_t>(t)].write_through) {
      put_pool_blocks(t, chain, /*keep=*/true, 0);
    }
  }
}

void TierStack::on_block_evicted(const BlockInfo& block) {
  // A put of this block kept to retry, or still in flight, into a tier below the first: put it
  // there now, while its bytes are intact (a no-op refresh where the first put went through).
  uint32_t again = 0;
  if (!retries_.empty()) {
    for (const Retry& r : retries_) {
      if (r.info.block == block.block && r.info.hash == block.hash) again |= 1u << r.tier;
    }
    std::erase_if(retries_, [&](const Retry& r) { return r.info.block == block.block && r.info.hash == block.hash; });
  }
  std::erase_if(puts_by_block_[static_cast<size_t>(block.block)], [&](const PutRef& ref) {
    auto it = pool_puts_.find(ref.key);
    CHECK(it != pool_puts_.end()) << "a put of block " << block.block << " indexed but not in flight";
    BlockInfo& b = it->second.blocks.blocks[ref.index];
    if (b.hash != block.hash) return false;  // an earlier use of the block id (cannot be in flight: kept)
    b.block = kRemovedInFlight;
    if (it->second.keep) again |= 1u << static_cast<int>(ref.key >> 56);
    return true;
  });
  for (int t = 1; t < num_tiers(); ++t) {
    if (again & (1u << t)) put_blocks(t, std::span<const BlockInfo>(&block, 1));
  }
  // Write-through wrote it at commit; the put only refreshes it then (or restores it when the
  // tier has evicted it since).
  put_blocks(0, std::span<const BlockInfo>(&block, 1));
}

// ---- KV events ----

void TierStack::record_store(int tier, TierOpId op, std::span<const TierPut> puts) {
  PendingStore& s = stores_[route_key(tier, op)];
  const size_t bs = static_cast<size_t>(pool_.layout().block_size);
  s.tokens.resize(puts.size() * bs);
  s.blocks.clear();
  for (size_t i = 0; i < puts.size(); ++i) {
    const TierPut& p = puts[i];
    CHECK_EQ(p.tokens.size(), bs);
    std::copy(p.tokens.begin(), p.tokens.end(), s.tokens.begin() + static_cast<std::ptrdiff_t>(i * bs));
    s.blocks.push_back(BlockInfo{-1, p.meta.block_hash, p.meta.parent_hash,
                                 std::span<const int32_t>(s.tokens).subspan(i * bs, bs), p.meta.ns, p.priority});
  }
}

void TierStack::announce_stored(int tier, TierOpId op, int64_t num_ok) {
  auto it = stores_.find(route_key(tier, op));
  if (it == stores_.end()) return;  // put before the listener was set
  Level& level = tiers_[static_cast<size_t>(tier)];
  announce_scratch_.clear();
  const std::vector<BlockInfo>& blocks = it->second.blocks;
  for (int64_t i = 0; i < num_ok && i < static_cast<int64_t>(blocks.size()); ++i) {
    const BlockInfo& b = blocks[static_cast<size_t>(i)];
    if (b.block == kRemovedInFlight) continue;  // written, then evicted before its completion
    if (level.announced.insert(b.hash).second) announce_scratch_.push_back(b);
  }
  if (listener_ != nullptr && !announce_scratch_.empty()) listener_->on_tier_stored(level.tier->medium(), announce_scratch_);
  stores_.erase(it);
}

void TierStack::set_event_listener(TierEventListener* listener) {
  listener_ = listener;
  if (listener_ == nullptr) return;
  for (int t = 0; t < num_tiers(); ++t) announce_found(t);
}

void TierStack::announce_found(int tier) {
  Level& level = tiers_[static_cast<size_t>(tier)];
  const FoundBlocks found = level.tier->take_found_blocks();
  if (found.blocks.empty()) return;
  // Parents before children: each block after the found ancestors it chains to, so a chain
  // written together comes out as one run (one BlockStored) whatever order the slots had.
  std::unordered_map<BlockHash, size_t> by_hash;
  for (size_t i = 0; i < found.blocks.size(); ++i) by_hash.emplace(found.blocks[i].hash, i);
  std::vector<bool> placed(found.blocks.size(), false);
  std::vector<size_t> order, up;
  order.reserve(found.blocks.size());
  for (size_t i = 0; i < found.blocks.size(); ++i) {
    up.clear();
    for (size_t j = i; !placed[j];) {  // i and its found ancestors not yet placed, child first
      placed[j] = true;
      up.push_back(j);
      auto parent = by_hash.find(found.blocks[j].parent_hash);
      if (parent == by_hash.end()) break;
      j = parent->second;
    }
    order.insert(order.end(), up.rbegin(), up.rend());
  }
  const size_t bs = static_cast<size_t>(found.block_size);
  announce_scratch_.clear();
  for (size_t i : order) {
    const FoundBlock& b = found.blocks[i];
    if (!level.announced.insert(b.hash).second) continue;
    announce_scratch_.push_back(BlockInfo{-1, b.hash, b.parent_hash,
                                          std::span<const int32_t>(found.tokens).subspan(i * bs, bs), b.ns, 0});
  }
  if (!announce_scratch_.empty()) listener_->on_tier_stored(level.tier->medium(), announce_scratch_);
}

void TierStack::announce_removed(int tier, BlockHash hash) {
  if (listener_ == nullptr) return;
  Level& level = tiers_[static_cast<size_t>(tier)];
  for (auto& [key, store] : stores_) {  // a put whose completion is still to come
    if (static_cast<int>(key >> 56) != tier) continue;
    for (BlockInfo& b : store.blocks) {
      if (b.hash == hash) b.block = kRemovedInFlight;
    }
  }
  if (level.announced.erase(hash) == 0) return;  // never told (put before the listener was set)
  listener_->on_tier_removed(level.tier->medium(), std::span<const BlockHash>(&hash, 1));
}

// ---- probes ----

ProbeId TierStack::probe(std::span<const BlockHash> chain) {
  const ProbeId id = next_id_++;
  Probe& p = probes_[id];
  p.chain.assign(chain.begin(), chain.end());
  step_probe(id);
  return id;
}

void TierStack::step_probe(ProbeId id) {
  for (;;) {
    auto it = probes_.find(id);
    if (it == probes_.end()) return;
    Probe& p = it->second;
    if (p.done || p.pending != 0) return;
    while (p.next_tier < num_tiers() && !tiers_[static_cast<size_t>(p.next_tier)].tier->enabled()) {
      note_disabled(p.next_tier);
      ++p.next_tier;
    }
    if (p.next_tier >= num_tiers() || p.pos >= static_cast<int64_t>(p.chain.size())) {
      p.done = true;
      return;
    }
    const int t = p.next_tier;
    const std::span<const BlockHash> rest = std::span<const BlockHash>(p.chain).subspan(static_cast<size_t>(p.pos));
    p.pending = tiers_[static_cast<size_t>(t)].tier->lookup(rest);
    routes_[route_key(t, p.pending)] = Route{Route::kProbe, id, 0};
    poll_tier(t);  // local tiers answer at once; `p` may be gone only through drop (not here)
  }
}

std::optional<std::vector<TierRun>> TierStack::take_probe(ProbeId id) {
  auto it = probes_.find(id);
  CHECK(it != probes_.end()) << "unknown probe " << id;
  if (!it->second.done) return std::nullopt;
  std::vector<TierRun> runs = std::move(it->second.runs);
  probes_.erase(it);
  return runs;
}

void TierStack::drop_probe(ProbeId id) {
  auto it = probes_.find(id);
  if (it == probes_.end()) return;
  if (it->second.pending != 0) {
    it->second.dropped = true;  // erased when its lookup completes
  } else {
    probes_.erase(it);
  }
}

uint32_t TierStack::holders_now(BlockHash hash) {
  query_bits_ = 0;
  for (int t = 0; t < num_tiers(); ++t) {
    Tier& tier = *tiers_[static_cast<size_t>(t)].tier;
    if (!tier.enabled()) continue;
    const TierOpId op = tier.lookup(std::span<const BlockHash>(&hash, 1));
    routes_[route_key(t, op)] = Route{Route::kQuery, 0, 0};
    poll_tier(t);
  }
  return query_bits_;
}

// ---- loads ----

LoadId TierStack::load(const KvNamespace& ns, std::span<const LoadItem> items) {
  const LoadId id = next_id_++;
  Load& load = loads_[id];
  load.ns = ns;
  load.items.assign(items.begin(), items.end());
  const int64_t n = static_cast<int64_t>(items.size());
  const size_t per_block = static_cast<size_t>(2 * pool_.layout().n_layer);
  const int64_t bs = pool_.layout().block_size;
  load.dests.resize(static_cast<size_t>(n) * per_block);
  load.result.num_items = n;
  load.result.tokens.assign(static_cast<size_t>(n * bs), -1);
  load.result.submit_ns = clock_.now_ns();
  load.gets.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const LoadItem& item = items[static_cast<size_t>(i)];
    CHECK(item.tier >= 0 && item.tier < num_tiers()) << "load from tier " << item.tier;
    const std::span<ByteSpan> segs(load.dests.data() + i * per_block, per_block);
    pool_.block_segments(item.block, segs);
    load.gets.push_back(TierGet{item.hash, ns, segs,
                                std::span<int32_t>(load.result.tokens).subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs))});
    if (load.parts.empty() || load.parts.back().tier != item.tier) load.parts.push_back(Get{item.tier, i, 0});
    ++load.parts.back().num_items;
  }
  load.num_pending = static_cast<int64_t>(load.parts.size());
  if (load.parts.empty()) return id;
  for (size_t part = 0; part < load.parts.size(); ++part) {
    const Get& g = load.parts[part];
    Tier& t = *tiers_[static_cast<size_t>(g.tier)].tier;
    const TierOpId op = t.get(std::span<const TierGet>(load.gets).subspan(static_cast<size_t>(g.first_item),
                                                                          static_cast<size_t>(g.num_items)));
    routes_[route_key(g.tier, op)] = Route{Route::kLoad, id, part};
  }
  return id;
}

void TierStack::finish_get(LoadId id, Load& load, size_t part, const TierCompletion& c) {
  Get& g = load.parts[part];
  CHECK(!g.done) << "get completed twice";
  g.done = true;
  g.num_ok = c.num_ok;
  g.status = c.status;
  TierCounters& counters = tiers_[static_cast<size_t>(g.tier)].counters;
  const int64_t latency = std::max<int64_t>(0, c.complete_ns - c.submit_ns);
  counters.load_latency.observe(static_cast<double>(latency) * 1e-9);
  counters.load_ns += latency;
  counters.loaded_bytes += c.bytes;
  load.result.bytes += c.bytes;
  if (--load.num_pending > 0) return;
  // Every get is in: the usable prefix ends at the first item that failed.
  LoadResult& r = load.result;
  r.num_ok = 0;
  for (const Get& p : load.parts) {
    r.num_ok += p.num_ok;
    if (p.num_ok < p.num_items) {
      r.status = p.status;
      ++tiers_[static_cast<size_t>(p.tier)].counters.failed_loads;
      break;
    }
  }
  for (int64_t i = 0; i < r.num_ok; ++i) ++tiers_[static_cast<size_t>(load.items[static_cast<size_t>(i)].tier)].counters.loaded_blocks;
  r.complete_ns = clock_.now_ns();
  (void)id;
}

std::optional<LoadResult> TierStack::take_load(LoadId id) {
  auto it = loads_.find(id);
  CHECK(it != loads_.end()) << "unknown load " << id;
  if (it->second.num_pending > 0) return std::nullopt;
  LoadResult r = std::move(it->second.result);
  if (it->second.parts.empty()) r.complete_ns = r.submit_ns;
  loads_.erase(it);
  return r;
}

// ---- completions ----

void TierStack::note_disabled(int tier) {
  Level& level = tiers_[static_cast<size_t>(tier)];
  if (level.counters.disabled) return;
  level.counters.disabled = true;
  if (listener_ != nullptr && !level.announced.empty()) {  // a disabled tier holds nothing usable
    std::vector<BlockHash> gone(level.announced.begin(), level.announced.end());
    level.announced.clear();
    listener_->on_tier_removed(level.tier->medium(), gone);
  }
  logger_.warn("kv tier " + std::string(level.tier->name()) + " disabled: " + level.tier->disabled_reason() +
               "; serving on without it");
}

void TierStack::on_completion(int tier, const TierCompletion& c) {
  auto it = routes_.find(route_key(tier, c.op));
  CHECK(it != routes_.end()) << "a completion of tier " << tier << " op " << c.op << " nobody submitted";
  const Route route = it->second;
  routes_.erase(it);
  switch (route.kind) {
    case Route::kPut:
      --num_puts_in_flight_;
      tiers_[static_cast<size_t>(tier)].put_completed = true;
      finish_pool_put(tier, c);
      if (listener_ != nullptr || !stores_.empty()) announce_stored(tier, c.op, c.num_ok);
      return;
    case Route::kQuery:
      if (c.num_ok > 0) query_bits_ |= 1u << tier;
      return;
    case Route::kProbe: {
      auto p = probes_.find(route.owner);
      CHECK(p != probes_.end());
      Probe& probe = p->second;
      probe.pending = 0;
      if (probe.dropped) {
        probes_.erase(p);
        return;
      }
      if (c.num_ok > 0) {
        probe.runs.push_back(TierRun{tier, probe.pos, c.num_ok});
        probe.pos += c.num_ok;
      }
      ++probe.next_tier;
      return;
    }
    case Route::kLoad: {
      auto l = loads_.find(route.owner);
      CHECK(l != loads_.end());
      finish_get(route.owner, l->second, route.part, c);
      return;
    }
  }
}

void TierStack::poll_tier(int tier) {
  Level& level = tiers_[static_cast<size_t>(tier)];
  level.completions.clear();
  level.tier->poll(level.completions);
  if (!level.tier->enabled()) note_disabled(tier);
  // on_completion never polls this tier again, so the scratch stays ours.
  for (const TierCompletion& c : level.completions) on_completion(tier, c);
  level.completions.clear();
}

void TierStack::poll() {
  for (int t = 0; t < num_tiers(); ++t) poll_tier(t);
  retry_puts();
  if (probes_.empty()) return;
  std::vector<ProbeId> ready;
  for (const auto& [id, p] : probes_) {
    if (!p.done && p.pending == 0) ready.push_back(id);
  }
  for (ProbeId id : ready) step_probe(id);
}

void TierStack::check_integrity() const {
  int64_t probe_ops = 0, load_ops = 0, put_ops = 0;
  for (const auto& [key, route] : routes_) {
    put_ops += route.kind == Route::kPut;
    if (route.kind == Route::kProbe) {
      ++probe_ops;
      CHECK(probes_.contains(route.owner)) << "a lookup in flight for a forgotten probe";
    } else if (route.kind == Route::kLoad) {  // (puts and queries own nothing)
      ++load_ops;
      auto l = loads_.find(route.owner);
      CHECK(l != loads_.end()) << "a get in flight for a forgotten load";
      CHECK(!l->second.parts[route.part].done);
    }
  }
  int64_t pending_probes = 0, pending_parts = 0;
  for (const auto& [id, p] : probes_) pending_probes += p.pending != 0;
  for (const auto& [id, l] : loads_) {
    int64_t open = 0;
    for (const Get& g : l.parts) open += !g.done;
    CHECK_EQ(open, l.num_pending);
    pending_parts += open;
    for (const LoadItem& item : l.items) {
      CHECK(pool_.state(item.block) == BlockState::kInUse) << "block " << item.block << " loading while not in use";
    }
  }
  CHECK_EQ(probe_ops, pending_probes);
  CHECK_EQ(put_ops, num_puts_in_flight_);
  int64_t indexed = 0, carried = 0;
  for (const auto& [key, p] : pool_puts_) {
    auto r = routes_.find(key);
    CHECK(r != routes_.end() && r->second.kind == Route::kPut) << "a pool put that is not in flight";
    for (const BlockInfo& b : p.blocks.blocks) carried += b.block == kRemovedInFlight ? 0 : 1;
  }
  for (size_t block = 0; block < puts_by_block_.size(); ++block) {
    for (const PutRef& ref : puts_by_block_[block]) {
      auto it = pool_puts_.find(ref.key);
      CHECK(it != pool_puts_.end() && ref.index < it->second.blocks.blocks.size() &&
            it->second.blocks.blocks[ref.index].block == static_cast<int32_t>(block))
          << "the per-block index of pool puts names a put that does not carry block " << block;
      ++indexed;
    }
  }
  CHECK_EQ(indexed, carried) << "pool puts in flight and their per-block index disagree";
  for (const Retry& r : retries_) {
    CHECK(r.tier >= 0 && r.tier < num_tiers() && r.attempt >= 1 && r.attempt <= kMaxPutRetries);
    CHECK(pool_.state(r.info.block) != BlockState::kFree) << "a write kept for a freed block " << r.info.block;
  }
  CHECK_EQ(load_ops, pending_parts);
}

}  // namespace pagoda::kvcache
