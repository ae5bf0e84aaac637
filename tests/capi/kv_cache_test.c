/* libpagoda_kv.so from C: a prompt is cached and hit, a fork shares blocks and copies on write,
 * the pool runs out and evicts, and calls out of protocol order get errors instead of aborts.
 * ABI 1.1: evicted blocks go down into a host tier and are loaded back with their bytes.
 * Prints "N passed, M failed" and exits non-zero on a failure. */
#include <pagoda/kv_cache.h>

#include <stdio.h>
#include <string.h>

static int passed = 0, failed = 0;

#define EXPECT(cond)                                                      \
  do {                                                                    \
    if (cond) {                                                           \
      ++passed;                                                           \
    } else {                                                              \
      ++failed;                                                           \
      fprintf(stderr, "%s:%d: failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, pagoda_kv_last_error()); \
    }                                                                     \
  } while (0)

enum { kBlock = 16 };

static pagoda_kv_cache* make_cache(int64_t num_blocks) {
  pagoda_kv_config c;
  memset(&c, 0, sizeof(c));
  c.struct_size = sizeof(c);
  c.abi_version = PAGODA_KV_ABI_VERSION;
  c.n_layer = 2;
  c.n_kv_head = 2;
  c.head_dim = 8;
  c.block_size = kBlock;
  c.dtype = PAGODA_KV_F16;
  c.eviction = PAGODA_KV_LRU;
  c.num_blocks = num_blocks;
  pagoda_kv_cache* cache = NULL;
  EXPECT(pagoda_kv_create(&c, &cache) == PAGODA_KV_OK);
  return cache;
}

/* Adds a sequence for tokens[0, n) through the prefix cache, computes the rest, commits. */
static pagoda_kv_seq serve(pagoda_kv_cache* cache, const int32_t* tokens, size_t n, const pagoda_kv_namespace* ns,
                           int64_t* cached) {
  pagoda_kv_match* match = NULL;
  EXPECT(pagoda_kv_match_prefix(cache, tokens, n, ns, &match, cached) == PAGODA_KV_OK);
  pagoda_kv_seq seq = -1;
  EXPECT(pagoda_kv_seq_add(cache, (int64_t)n + 64, ns, 0, &seq) == PAGODA_KV_OK);
  EXPECT(pagoda_kv_seq_adopt(cache, seq, match) == PAGODA_KV_OK);
  int64_t slots[512];
  pagoda_kv_block_copy copy;
  int32_t num_copies = -1;
  EXPECT(pagoda_kv_seq_append(cache, seq, tokens + *cached, n - (size_t)*cached, slots, &copy, &num_copies) == PAGODA_KV_OK);
  EXPECT(num_copies == 0);
  EXPECT(pagoda_kv_seq_commit(cache, seq) == PAGODA_KV_OK);
  return seq;
}

/* ABI 1.1: a host tier below the pool. A prompt's blocks are marked, evicted (offloaded),
 * located in the tier, and loaded into a new sequence with the marks intact. */
static void tiers(void) {
  EXPECT(pagoda_kv_abi_minor() >= 1);
  pagoda_kv_cache* cache = make_cache(8);
  const pagoda_kv_namespace ns = {11, 22, 33};
  pagoda_kv_tier_config tc;
  memset(&tc, 0, sizeof(tc));
  tc.struct_size = sizeof(tc);
  tc.kind = PAGODA_KV_TIER_HOST;
  tc.capacity_bytes = 1 << 20;
  int32_t index = -1, num_tiers = -1;
  EXPECT(pagoda_kv_tier_attach(cache, &tc, &index) == PAGODA_KV_OK && index == 0);
  EXPECT(pagoda_kv_num_tiers(cache, &num_tiers) == PAGODA_KV_OK && num_tiers == 1);
  tc.kind = PAGODA_KV_TIER_DISK; /* no dir */
  EXPECT(pagoda_kv_tier_attach(cache, &tc, &index) == PAGODA_KV_INVALID_ARGUMENT);

  int32_t prompt[3 * kBlock + 1];
  for (int i = 0; i < 3 * kBlock + 1; ++i) prompt[i] = 500 + 3 * i;
  int64_t cached = -1;
  pagoda_kv_seq seq = serve(cache, prompt, 3 * kBlock + 1, &ns, &cached);
  int32_t table[8];
  size_t n_table = 0;
  EXPECT(pagoda_kv_seq_block_table(cache, seq, table, 8, &n_table) == PAGODA_KV_OK && n_table == 4);
  for (int j = 0; j < 3; ++j) {
    void* k = NULL;
    size_t bytes = 0;
    EXPECT(pagoda_kv_block_memory(cache, table[j], 1, 1, &k, &bytes) == PAGODA_KV_OK);
    ((unsigned char*)k)[bytes - 1] = (unsigned char)(0x40 + j); /* the "KV" the engine wrote */
  }
  EXPECT(pagoda_kv_seq_free(cache, seq) == PAGODA_KV_OK);
  int64_t evicted = -1;
  EXPECT(pagoda_kv_evict_cached(cache, &evicted) == PAGODA_KV_OK && evicted == 3);
  int32_t where[8];
  size_t n_where = 0;
  EXPECT(pagoda_kv_locate(cache, prompt, 3 * kBlock + 1, &ns, where, 8, &n_where) == PAGODA_KV_OK);
  EXPECT(n_where == 3 && where[0] == 1 && where[1] == 1 && where[2] == 1); /* all in tier 0 */
  const pagoda_kv_namespace other = {11, 22, 34};
  EXPECT(pagoda_kv_locate(cache, prompt, 3 * kBlock + 1, &other, where, 8, &n_where) == PAGODA_KV_OK && n_where == 0);

  /* Load: a new sequence adopts the (empty) pool match, then reads the blocks from the tier. */
  pagoda_kv_match* match = NULL;
  EXPECT(pagoda_kv_match_prefix(cache, prompt, 3 * kBlock + 1, &ns, &match, &cached) == PAGODA_KV_OK && cached == 0);
  pagoda_kv_seq again = -1;
  EXPECT(pagoda_kv_seq_add(cache, 4 * kBlock, &ns, 0, &again) == PAGODA_KV_OK);
  EXPECT(pagoda_kv_seq_adopt(cache, again, match) == PAGODA_KV_OK);
  int64_t loaded = -1, length = -1, computed = -1;
  EXPECT(pagoda_kv_seq_load(cache, again, prompt, 3 * kBlock + 1, &loaded) == PAGODA_KV_OK && loaded == 3 * kBlock);
  EXPECT(pagoda_kv_seq_length(cache, again, &length, &computed) == PAGODA_KV_OK && length == 3 * kBlock && computed == length);
  EXPECT(pagoda_kv_seq_block_table(cache, again, table, 8, &n_table) == PAGODA_KV_OK && n_table == 3);
  for (int j = 0; j < 3; ++j) {
    void* k = NULL;
    size_t bytes = 0;
    EXPECT(pagoda_kv_block_memory(cache, table[j], 1, 1, &k, &bytes) == PAGODA_KV_OK);
    EXPECT(((unsigned char*)k)[bytes - 1] == 0x40 + j); /* the bytes came back from the tier */
  }
  EXPECT(pagoda_kv_locate(cache, prompt, 3 * kBlock + 1, &ns, where, 8, &n_where) == PAGODA_KV_OK);
  EXPECT(n_where == 3 && where[0] == 0 && where[2] == 0); /* in the pool again */
  pagoda_kv_tier_stats ts;
  memset(&ts, 0, sizeof(ts));
  ts.struct_size = sizeof(ts);
  EXPECT(pagoda_kv_get_tier_stats(cache, 0, &ts) == PAGODA_KV_OK);
  EXPECT(strcmp(ts.name, "host") == 0 && ts.enabled == 1);
  EXPECT(ts.offloaded_blocks == 3 && ts.loaded_blocks == 3 && ts.used_blocks == 3 && ts.bytes_read > 0);
  EXPECT(ts.capacity_blocks > 3 && ts.corrupt_records == 0);
  EXPECT(pagoda_kv_get_tier_stats(cache, 1, &ts) == PAGODA_KV_INVALID_ARGUMENT);

  /* Out of protocol order: a load into a sequence with an uncommitted token. */
  int64_t slot = 0;
  pagoda_kv_block_copy copy;
  int32_t num_copies = 0;
  EXPECT(pagoda_kv_seq_append(cache, again, prompt + 3 * kBlock, 1, &slot, &copy, &num_copies) == PAGODA_KV_OK);
  EXPECT(pagoda_kv_seq_load(cache, again, prompt, 3 * kBlock + 1, &loaded) == PAGODA_KV_INVALID_ARGUMENT);
  EXPECT(pagoda_kv_check_integrity(cache) == PAGODA_KV_OK);
  pagoda_kv_destroy(cache);
}

int main(void) {
  EXPECT(pagoda_kv_abi_version() == PAGODA_KV_ABI_VERSION);
  pagoda_kv_config bad;
  memset(&bad, 0, sizeof(bad));
  bad.struct_size = sizeof(bad);
  bad.abi_version = PAGODA_KV_ABI_VERSION + 1;
  pagoda_kv_cache* none = NULL;
  EXPECT(pagoda_kv_create(&bad, &none) == PAGODA_KV_ABI_MISMATCH && none == NULL);
  EXPECT(strstr(pagoda_kv_last_error(), "abi_version") != NULL);

  pagoda_kv_cache* cache = make_cache(8);
  const char* model = "my-model-v1";
  pagoda_kv_namespace ns = {pagoda_kv_hash_bytes(model, strlen(model), 0), 1, 0};
  int32_t prompt[40];
  for (int i = 0; i < 40; ++i) prompt[i] = 1000 + i;

  int64_t cached = -1;
  pagoda_kv_seq a = serve(cache, prompt, 40, &ns, &cached);
  EXPECT(cached == 0);
  int32_t table[8];
  size_t num_blocks = 0;
  EXPECT(pagoda_kv_seq_block_table(cache, a, table, 8, &num_blocks) == PAGODA_KV_OK && num_blocks == 3);
  int64_t slots[40];
  EXPECT(pagoda_kv_seq_slot_mapping(cache, a, 0, 40, slots) == PAGODA_KV_OK);
  EXPECT(slots[17] == (int64_t)table[1] * kBlock + 1);
  /* K bytes of block 0, layer 1: write a pattern that a copy must carry. */
  void* k = NULL;
  size_t k_bytes = 0;
  EXPECT(pagoda_kv_block_memory(cache, table[0], 1, 0, &k, &k_bytes) == PAGODA_KV_OK);
  EXPECT(k_bytes == kBlock * 2 * 8 * 2); /* block_size x kv heads x head dim x f16 */
  memset(k, 0x5a, k_bytes);
  EXPECT(pagoda_kv_seq_free(cache, a) == PAGODA_KV_OK);

  pagoda_kv_stats stats;
  memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats);
  EXPECT(pagoda_kv_get_stats(cache, &stats) == PAGODA_KV_OK);
  EXPECT(stats.num_cached == 2 && stats.num_in_use == 0); /* two full blocks stay cached */

  pagoda_kv_seq b = serve(cache, prompt, 40, &ns, &cached);
  EXPECT(cached == 32);
  pagoda_kv_namespace other = ns;
  other.cache_salt = pagoda_kv_hash_bytes("tenant-2", 8, 0);
  pagoda_kv_match* miss = NULL;
  int64_t other_cached = -1;
  EXPECT(pagoda_kv_match_prefix(cache, prompt, 40, &other, &miss, &other_cached) == PAGODA_KV_OK && other_cached == 0);
  EXPECT(pagoda_kv_match_release(cache, miss) == PAGODA_KV_OK);
  EXPECT(pagoda_kv_match_release(cache, miss) == PAGODA_KV_NOT_FOUND);

  /* Fork: the child shares every block; its first append into the shared partial block copies. */
  pagoda_kv_seq child = -1;
  EXPECT(pagoda_kv_seq_fork(cache, b, &child) == PAGODA_KV_OK);
  int32_t ref = 0, state = -1;
  EXPECT(pagoda_kv_block_state(cache, table[0], &ref, &state) == PAGODA_KV_OK && ref == 2 && state == 1);
  int32_t token = 7;
  int64_t slot = -1;
  pagoda_kv_block_copy copy = {-1, -1};
  int32_t num_copies = -1;
  EXPECT(pagoda_kv_seq_append(cache, child, &token, 1, &slot, &copy, &num_copies) == PAGODA_KV_OK);
  EXPECT(num_copies == 1 && copy.src_block >= 0 && copy.dst_block >= 0 && copy.src_block != copy.dst_block);
  EXPECT(pagoda_kv_copy_block(cache, copy.src_block, copy.dst_block) == PAGODA_KV_OK);
  EXPECT(slot == (int64_t)copy.dst_block * kBlock + 8);
  void* shared_k = NULL;
  EXPECT(pagoda_kv_block_memory(cache, table[0], 1, 0, &shared_k, &k_bytes) == PAGODA_KV_OK);
  EXPECT(((unsigned char*)shared_k)[k_bytes - 1] == 0x5a); /* the hit reused the written block */

  /* Errors, not aborts. */
  EXPECT(pagoda_kv_seq_free(cache, 12345) == PAGODA_KV_NOT_FOUND);
  EXPECT(pagoda_kv_seq_fork(cache, child, &child) == PAGODA_KV_INVALID_ARGUMENT); /* uncommitted token */
  EXPECT(pagoda_kv_seq_truncate(cache, b, 1000) == PAGODA_KV_INVALID_ARGUMENT);
  EXPECT(pagoda_kv_seq_slot_mapping(cache, b, 30, 20, slots) == PAGODA_KV_INVALID_ARGUMENT);
  EXPECT(pagoda_kv_block_memory(cache, 99, 0, 0, &k, &k_bytes) == PAGODA_KV_INVALID_ARGUMENT);
  EXPECT(pagoda_kv_copy_block(cache, 1, 1) == PAGODA_KV_INVALID_ARGUMENT);
  pagoda_kv_match* full = NULL;
  EXPECT(pagoda_kv_match_prefix(cache, prompt, 40, &ns, &full, &cached) == PAGODA_KV_OK);
  EXPECT(pagoda_kv_seq_adopt(cache, b, full) == PAGODA_KV_INVALID_ARGUMENT); /* b holds tokens */
  EXPECT(pagoda_kv_match_release(cache, full) == PAGODA_KV_NOT_FOUND);       /* consumed anyway */

  /* Out of blocks: nothing changes. */
  int32_t many[200];
  for (int i = 0; i < 200; ++i) many[i] = i;
  int64_t many_slots[200];
  int64_t before = -1, after = -1;
  EXPECT(pagoda_kv_seq_length(cache, child, &before, NULL) == PAGODA_KV_OK);
  EXPECT(pagoda_kv_seq_append(cache, child, many, 200, many_slots, &copy, &num_copies) == PAGODA_KV_OUT_OF_BLOCKS);
  EXPECT(pagoda_kv_seq_length(cache, child, &after, NULL) == PAGODA_KV_OK && after == before);
  EXPECT(pagoda_kv_check_integrity(cache) == PAGODA_KV_OK);

  /* Destroy with a sequence and a pinned match still alive. */
  pagoda_kv_match* left = NULL;
  EXPECT(pagoda_kv_match_prefix(cache, prompt, 40, &ns, &left, &cached) == PAGODA_KV_OK);
  pagoda_kv_destroy(cache);

  tiers();
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
