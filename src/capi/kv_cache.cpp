// libpagoda_kv.so: include/pagoda/kv_cache.h over kvcache::BlockPool + BlockManager (tiers:
// kv_tiers.cpp; the handles' objects: kv_cache_internal.h).
//
// Every entry point validates what the block manager would CHECK (unknown ids, calls out of
// protocol order, ranges) and answers a status instead, catches every exception, and takes the
// cache's mutex. Matches are heap objects owned by the cache (live_matches) so that destroy can
// release any the caller forgot before the block manager goes (it aborts on a live pin).
#include <cstring>

#include "capi/kv_cache_internal.h"

namespace {

using pagoda::capi::fail;
using pagoda::capi::find_seq;
using pagoda::capi::guarded;
using pagoda::capi::invalid;
using pagoda::capi::to_ns;
using pagoda::kvcache::BlockManager;

pagoda_kv_status check_block(const pagoda_kv_cache* cache, int32_t block) {
  if (block < 0 || block >= cache->pool->num_blocks()) {
    return invalid("block " + std::to_string(block) + " outside [0, " + std::to_string(cache->pool->num_blocks()) + ")");
  }
  return PAGODA_KV_OK;
}

}  // namespace

extern "C" {

uint32_t pagoda_kv_abi_version(void) { return PAGODA_KV_ABI_VERSION; }
uint32_t pagoda_kv_abi_minor(void) { return PAGODA_KV_ABI_MINOR; }

const char* pagoda_kv_status_name(pagoda_kv_status status) {
  switch (status) {
    case PAGODA_KV_OK: return "ok";
    case PAGODA_KV_INVALID_ARGUMENT: return "invalid argument";
    case PAGODA_KV_OUT_OF_BLOCKS: return "out of blocks";
    case PAGODA_KV_NOT_FOUND: return "not found";
    case PAGODA_KV_ABI_MISMATCH: return "ABI mismatch";
    case PAGODA_KV_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* pagoda_kv_last_error(void) { return pagoda::capi::last_error.c_str(); }

uint64_t pagoda_kv_hash_bytes(const void* data, size_t size, uint64_t seed) {
  return pagoda::kvcache::xxhash64(data, size, seed);
}

pagoda_kv_status pagoda_kv_create(const pagoda_kv_config* config, pagoda_kv_cache** out) {
  pagoda::capi::last_error.clear();
  if (config == nullptr || out == nullptr) return invalid("config and out must not be NULL");
  *out = nullptr;
  if (config->struct_size < sizeof(pagoda_kv_config)) {
    return fail(PAGODA_KV_ABI_MISMATCH, "config.struct_size " + std::to_string(config->struct_size) + " < " +
                                            std::to_string(sizeof(pagoda_kv_config)) + " (an older header?)");
  }
  if (config->abi_version != PAGODA_KV_ABI_VERSION) {
    return fail(PAGODA_KV_ABI_MISMATCH, "config.abi_version " + std::to_string(config->abi_version) +
                                            ", the library has " + std::to_string(PAGODA_KV_ABI_VERSION));
  }
  if (config->dtype < PAGODA_KV_F32 || config->dtype > PAGODA_KV_INT4) return invalid("unknown dtype");
  if (config->eviction < PAGODA_KV_LRU || config->eviction > PAGODA_KV_PRIORITY) return invalid("unknown eviction");
  try {
    pagoda::kvcache::KvLayout layout;
    layout.n_layer = config->n_layer;
    layout.n_kv_head = config->n_kv_head;
    layout.head_dim = config->head_dim;
    layout.block_size = config->block_size;
    layout.dtype = static_cast<pagoda::kernels::KvDType>(config->dtype);
    pagoda::Status valid = layout.validate();
    if (!valid.is_ok()) return invalid(valid.message());
    int64_t num_blocks = config->num_blocks;
    if (num_blocks <= 0) {
      auto plan = pagoda::kvcache::plan_kv_pool(layout, config->memory_bytes);
      if (!plan.is_ok()) return invalid(plan.status().message());
      num_blocks = plan->num_blocks;
    }
    if (num_blocks > (int64_t{1} << 30)) return invalid("num_blocks " + std::to_string(num_blocks) + " is too many");
    auto pool = pagoda::kvcache::BlockPool::create(layout, num_blocks);
    if (!pool.is_ok()) return invalid(pool.status().message());
    auto cache = std::make_unique<pagoda_kv_cache>();
    cache->pool = std::make_unique<pagoda::kvcache::BlockPool>(std::move(pool).value());
    pagoda::kvcache::BlockManagerOptions options;
    options.eviction = static_cast<pagoda::kvcache::EvictionPolicyKind>(config->eviction);
    cache->manager = std::make_unique<BlockManager>(*cache->pool, options);
    *out = cache.release();
    return PAGODA_KV_OK;
  } catch (const std::exception& e) {
    return fail(PAGODA_KV_INTERNAL, std::string("create: ") + e.what());
  }
}

void pagoda_kv_destroy(pagoda_kv_cache* cache) {
  if (cache == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(cache->mutex);
    for (pagoda_kv_match* m : cache->live_matches) delete m;  // unpins
    cache->live_matches.clear();
    if (cache->tiers != nullptr) {  // its puts complete first; then it stops listening
      pagoda::capi::settle_tiers(cache);
      cache->manager->remove_listener(cache->tiers.get());
      cache->tiers.reset();
    }
  }
  cache->manager.reset();  // frees every sequence
  delete cache;
}

pagoda_kv_status pagoda_kv_match_prefix(pagoda_kv_cache* cache, const int32_t* tokens, size_t n,
                                        const pagoda_kv_namespace* ns, pagoda_kv_match** out, int64_t* num_tokens) {
  return guarded(cache, [&] {
    if ((tokens == nullptr && n > 0) || out == nullptr) return invalid("tokens and out must not be NULL");
    auto m = std::make_unique<pagoda_kv_match>();
    m->match = cache->manager->match_prefix(std::span<const int32_t>(tokens, n), to_ns(ns));
    if (num_tokens != nullptr) *num_tokens = m->match.num_tokens();
    *out = m.get();
    cache->live_matches.insert(m.release());
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_match_release(pagoda_kv_cache* cache, pagoda_kv_match* match) {
  return guarded(cache, [&] {
    if (cache->live_matches.erase(match) == 0) return fail(PAGODA_KV_NOT_FOUND, "unknown or released match");
    delete match;
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_add(pagoda_kv_cache* cache, int64_t max_tokens, const pagoda_kv_namespace* ns,
                                   int32_t priority, pagoda_kv_seq* out) {
  return guarded(cache, [&] {
    if (out == nullptr) return invalid("out must not be NULL");
    if (max_tokens < 0 || max_tokens > (int64_t{1} << 34)) return invalid("max_tokens out of range");
    pagoda::kvcache::SequenceOptions o;
    o.ns = to_ns(ns);
    o.priority = priority;
    *out = cache->manager->add_sequence(max_tokens, o);
    cache->seqs[*out] = {o.ns};
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_adopt(pagoda_kv_cache* cache, pagoda_kv_seq seq, pagoda_kv_match* match) {
  return guarded(cache, [&] {
    if (cache->live_matches.erase(match) == 0) return fail(PAGODA_KV_NOT_FOUND, "unknown or released match");
    std::unique_ptr<pagoda_kv_match> owned(match);  // consumed whatever happens next
    if (pagoda_kv_status s = find_seq(cache, seq); s != PAGODA_KV_OK) return s;
    if (cache->manager->length(seq) != 0) return invalid("adopt into a sequence that already holds tokens");
    if (!owned->match.empty() && !(owned->match.ns() == cache->seqs[seq].ns)) {
      return invalid("the match is from another namespace than the sequence");
    }
    cache->manager->adopt(seq, std::move(owned->match));
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_append(pagoda_kv_cache* cache, pagoda_kv_seq seq, const int32_t* tokens, size_t n,
                                      int64_t* slots_out, pagoda_kv_block_copy* copy_out, int32_t* num_copies) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = find_seq(cache, seq); s != PAGODA_KV_OK) return s;
    if (n > 0 && (tokens == nullptr || slots_out == nullptr)) return invalid("tokens and slots_out must not be NULL");
    if (copy_out == nullptr || num_copies == nullptr) return invalid("copy_out and num_copies must not be NULL");
    cache->copies.clear();
    *num_copies = 0;
    if (!cache->manager->append(seq, std::span<const int32_t>(tokens, n), std::span<int64_t>(slots_out, n), cache->copies)) {
      return fail(PAGODA_KV_OUT_OF_BLOCKS, "not enough free or evictable blocks for " + std::to_string(n) + " tokens (" +
                                               std::to_string(cache->manager->num_available_blocks()) + " available)");
    }
    if (!cache->copies.empty()) {
      *copy_out = {cache->copies[0].src_block, cache->copies[0].dst_block};
      *num_copies = 1;
    }
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_blocks_needed(pagoda_kv_cache* cache, pagoda_kv_seq seq, int64_t n, int64_t* blocks) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = find_seq(cache, seq); s != PAGODA_KV_OK) return s;
    if (n < 0 || blocks == nullptr) return invalid("n must be >= 0 and blocks not NULL");
    *blocks = cache->manager->blocks_needed(seq, n);
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_commit(pagoda_kv_cache* cache, pagoda_kv_seq seq) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = find_seq(cache, seq); s != PAGODA_KV_OK) return s;
    cache->manager->commit(seq);
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_fork(pagoda_kv_cache* cache, pagoda_kv_seq seq, pagoda_kv_seq* child) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = find_seq(cache, seq); s != PAGODA_KV_OK) return s;
    if (child == nullptr) return invalid("child must not be NULL");
    if (cache->manager->num_computed(seq) != cache->manager->length(seq)) {
      return invalid("fork of a sequence with uncommitted tokens: commit first");
    }
    *child = cache->manager->fork(seq);
    cache->seqs[*child] = cache->seqs[seq];
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_truncate(pagoda_kv_cache* cache, pagoda_kv_seq seq, int64_t new_length) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = find_seq(cache, seq); s != PAGODA_KV_OK) return s;
    if (new_length < 0 || new_length > cache->manager->length(seq)) {
      return invalid("truncate to " + std::to_string(new_length) + " of " + std::to_string(cache->manager->length(seq)));
    }
    cache->manager->truncate(seq, new_length);
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_free(pagoda_kv_cache* cache, pagoda_kv_seq seq) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = find_seq(cache, seq); s != PAGODA_KV_OK) return s;
    cache->manager->free_sequence(seq);
    cache->seqs.erase(seq);
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_length(pagoda_kv_cache* cache, pagoda_kv_seq seq, int64_t* length, int64_t* num_computed) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = find_seq(cache, seq); s != PAGODA_KV_OK) return s;
    if (length != nullptr) *length = cache->manager->length(seq);
    if (num_computed != nullptr) *num_computed = cache->manager->num_computed(seq);
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_block_table(pagoda_kv_cache* cache, pagoda_kv_seq seq, int32_t* out, size_t capacity,
                                           size_t* num_blocks) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = find_seq(cache, seq); s != PAGODA_KV_OK) return s;
    if (num_blocks == nullptr || (out == nullptr && capacity > 0)) return invalid("num_blocks (and out) must not be NULL");
    const std::vector<int32_t>& table = cache->manager->block_table(seq);
    *num_blocks = table.size();
    const size_t n = std::min(capacity, table.size());
    if (n > 0) std::memcpy(out, table.data(), n * sizeof(int32_t));  // out may be NULL with capacity 0 (a size query)
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_slot_mapping(pagoda_kv_cache* cache, pagoda_kv_seq seq, int64_t begin, int64_t n,
                                            int64_t* slots_out) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = find_seq(cache, seq); s != PAGODA_KV_OK) return s;
    const int64_t length = cache->manager->length(seq);
    if (begin < 0 || n < 0 || begin + n > length) {
      return invalid("positions [" + std::to_string(begin) + ", " + std::to_string(begin + n) + ") outside [0, " +
                     std::to_string(length) + ")");
    }
    if (n > 0 && slots_out == nullptr) return invalid("slots_out must not be NULL");
    const std::vector<int32_t>& table = cache->manager->block_table(seq);
    const int64_t bs = cache->pool->layout().block_size;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = begin + i;
      slots_out[i] = static_cast<int64_t>(table[static_cast<size_t>(p / bs)]) * bs + p % bs;
    }
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_block_memory(pagoda_kv_cache* cache, int32_t block, int32_t layer, int32_t which, void** data,
                                        size_t* bytes) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = check_block(cache, block); s != PAGODA_KV_OK) return s;
    const int64_t n_layer = cache->pool->layout().n_layer;
    if (layer < 0 || layer >= n_layer || (which != 0 && which != 1) || data == nullptr || bytes == nullptr) {
      return invalid("layer in [0, n_layer), which 0 (K) or 1 (V), data and bytes not NULL");
    }
    std::vector<std::span<uint8_t>> segments(static_cast<size_t>(2 * n_layer));
    cache->pool->block_segments(block, segments);
    const std::span<uint8_t> seg = segments[static_cast<size_t>(2 * layer + which)];
    *data = seg.data();
    *bytes = seg.size();
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_copy_block(pagoda_kv_cache* cache, int32_t src, int32_t dst) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = check_block(cache, src); s != PAGODA_KV_OK) return s;
    if (pagoda_kv_status s = check_block(cache, dst); s != PAGODA_KV_OK) return s;
    if (src == dst) return invalid("copy of a block onto itself");
    cache->pool->copy_block(src, dst);
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_block_state(pagoda_kv_cache* cache, int32_t block, int32_t* ref_count, int32_t* state) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = check_block(cache, block); s != PAGODA_KV_OK) return s;
    if (ref_count != nullptr) *ref_count = cache->pool->ref_count(block);
    if (state != nullptr) *state = static_cast<int32_t>(cache->pool->state(block));
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_get_stats(pagoda_kv_cache* cache, pagoda_kv_stats* out) {
  return guarded(cache, [&] {
    if (out == nullptr || out->struct_size < sizeof(pagoda_kv_stats)) {
      return fail(PAGODA_KV_ABI_MISMATCH, "stats.struct_size must be sizeof(pagoda_kv_stats)");
    }
    const pagoda::kvcache::BlockPool& pool = *cache->pool;
    const pagoda::kvcache::BlockManagerStats& s = cache->manager->stats();
    out->num_blocks = pool.num_blocks();
    out->num_free = pool.num_free();
    out->num_in_use = pool.num_in_use();
    out->num_cached = pool.num_cached();
    out->num_sequences = cache->manager->num_sequences();
    out->num_lookups = s.num_lookups;
    out->num_hit_tokens = s.num_hit_tokens;
    out->num_missed_tokens = s.num_missed_tokens;
    out->num_evictions = s.num_evictions;
    out->num_blocks_allocated = s.num_blocks_allocated;
    out->num_cow_copies = s.num_cow_copies;
    out->num_committed_blocks = s.num_committed_blocks;
    out->bytes_per_block = pool.layout().bytes_per_block();
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_check_integrity(pagoda_kv_cache* cache) {
  return guarded(cache, [&] {
    cache->manager->check_integrity();
    return PAGODA_KV_OK;
  });
}

}  // extern "C"
