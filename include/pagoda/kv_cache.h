/* Pagoda's KV cache as a C library (libpagoda_kv.so): the block pool, block tables and slot
 * mappings, prefix caching through chained block hashes and a radix index, copy-on-write forks
 * and eviction, for any engine in any language (C, Python ctypes, Rust, Go, ...).
 *
 * Model: the cache owns one pool of KV blocks (allocated once at create). A sequence is a table
 * of blocks covering positions [0, length); position p lives at
 *     slot(p) = block_table[p / block_size] * block_size + p % block_size
 * in every layer's K and V arrays (pagoda_kv_block_memory gives their bytes). An engine
 *     1. matches a prompt's cached prefix (pinned until adopted or released),
 *     2. adds a sequence and adopts the match (its first tokens are then already computed),
 *     3. appends new tokens (getting their slots, and at most one block copy to do first),
 *     4. writes K/V at those slots in its forward pass, then commits (full blocks become
 *        cacheable for later prompts),
 *     5. forks (parallel sampling shares blocks copy-on-write) and finally frees the sequence:
 *        its committed blocks stay cached until evicted (LRU / LFU / priority).
 * Only full blocks are cached, a hit never covers a prompt's last token, and every hit is
 * confirmed token by token: a hash collision costs a miss, never wrong KV.
 *
 * ABI. Opaque handles; plain C types; no exception or C++ type crosses it. Every function that
 * can fail returns a pagoda_kv_status and, on failure, leaves a message for
 * pagoda_kv_last_error() (per calling thread). Structs that callers fill start with struct_size
 * = sizeof(the struct), so later versions can grow them. PAGODA_KV_ABI_VERSION is bumped on any
 * incompatible change; pagoda_kv_create refuses a config whose abi_version differs from the
 * library's. The library's soname is libpagoda_kv.so.1 (major = ABI version).
 *
 * Versions. PAGODA_KV_ABI_VERSION is the major version (the soname); PAGODA_KV_ABI_MINOR counts
 * compatible additions: a caller built against minor m may call what minor m added once
 * pagoda_kv_abi_minor() >= m. 1.0: the pool, sequences, matches. 1.1: tiers (below).
 *
 * Tiers (1.1). Below the pool, fastest first: a host DRAM tier and an SSD tier (a directory of
 * block records, kept across runs), as Pagoda's engine stacks them (kvcache/tier_stack.h):
 *   - offload: when the pool evicts a cached block its record is written into the first tier
 *     (write-back); a tier attached with write_through gets every committed block at once; a
 *     tier that must make room demotes its victim to the next tier down (host -> disk);
 *     pagoda_kv_evict_cached evicts every cached block now (all go down);
 *   - lookup: pagoda_kv_locate says, block by block, whether a prompt's prefix is in the pool or
 *     in which tier, without changing the pool;
 *   - load: after adopting the pool's match, pagoda_kv_seq_load reads the next whole blocks
 *     the tiers hold into fresh pool blocks of the sequence (blocking until read), verifying
 *     each record's checksum and token ids; what fails to load or confirm is left for the
 *     engine to compute (the sequence is shorter).
 * Tiers are inclusive: a loaded block keeps its copy below.
 *
 * Threads: calls on one cache are serialized by the cache (a mutex); different caches are
 * independent. */
#ifndef PAGODA_KV_CACHE_H_
#define PAGODA_KV_CACHE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PAGODA_KV_API __attribute__((visibility("default")))
#else
#define PAGODA_KV_API
#endif

#define PAGODA_KV_ABI_VERSION 1
#define PAGODA_KV_ABI_MINOR 1

typedef enum pagoda_kv_status {
  PAGODA_KV_OK = 0,
  PAGODA_KV_INVALID_ARGUMENT = 1, /* a bad value, or a call out of protocol order */
  PAGODA_KV_OUT_OF_BLOCKS = 2,    /* an ordinary answer: nothing changed; free or wait */
  PAGODA_KV_NOT_FOUND = 3,        /* unknown sequence or match */
  PAGODA_KV_ABI_MISMATCH = 4,
  PAGODA_KV_INTERNAL = 5          /* out of memory or a library bug */
} pagoda_kv_status;

typedef enum pagoda_kv_dtype {
  PAGODA_KV_F32 = 0, PAGODA_KV_F16 = 1, PAGODA_KV_BF16 = 2, PAGODA_KV_FP8_E4M3 = 3,
  PAGODA_KV_FP8_E5M2 = 4, PAGODA_KV_INT8 = 5, PAGODA_KV_INT4 = 6
} pagoda_kv_dtype;

typedef enum pagoda_kv_eviction { PAGODA_KV_LRU = 0, PAGODA_KV_LFU = 1, PAGODA_KV_PRIORITY = 2 } pagoda_kv_eviction;

typedef struct pagoda_kv_config {
  uint32_t struct_size;  /* sizeof(pagoda_kv_config) */
  uint32_t abi_version;  /* PAGODA_KV_ABI_VERSION */
  int32_t n_layer;
  int32_t n_kv_head;
  int32_t head_dim;
  int32_t block_size;    /* tokens per block, e.g. 16 */
  int32_t dtype;         /* pagoda_kv_dtype */
  int32_t eviction;      /* pagoda_kv_eviction */
  int64_t num_blocks;    /* > 0: this many blocks; 0: as many as memory_bytes holds */
  int64_t memory_bytes;
} pagoda_kv_config;

/* What cached blocks are valid for: blocks are shared only between equal namespaces. Derive the
 * fields from the model's identity, the KV format and the tenant (pagoda_kv_hash_bytes). */
typedef struct pagoda_kv_namespace {
  uint64_t model_fingerprint;
  uint64_t kv_format;
  uint64_t cache_salt;
} pagoda_kv_namespace;

typedef struct pagoda_kv_block_copy {
  int32_t src_block;
  int32_t dst_block;
} pagoda_kv_block_copy;

typedef struct pagoda_kv_stats {
  uint32_t struct_size;  /* set by the caller: sizeof(pagoda_kv_stats) */
  int64_t num_blocks, num_free, num_in_use, num_cached;
  int64_t num_sequences;
  int64_t num_lookups, num_hit_tokens, num_missed_tokens;
  int64_t num_evictions, num_blocks_allocated, num_cow_copies, num_committed_blocks;
  int64_t bytes_per_block;
} pagoda_kv_stats;

typedef struct pagoda_kv_cache pagoda_kv_cache; /* opaque */
typedef struct pagoda_kv_match pagoda_kv_match; /* a pinned cached prefix (opaque) */
typedef int64_t pagoda_kv_seq;

PAGODA_KV_API uint32_t pagoda_kv_abi_version(void);
PAGODA_KV_API uint32_t pagoda_kv_abi_minor(void); /* 1.1 */
PAGODA_KV_API const char* pagoda_kv_status_name(pagoda_kv_status status);
/* The message of this thread's last failed call ("" if none); valid until its next call. */
PAGODA_KV_API const char* pagoda_kv_last_error(void);
/* xxHash64 of bytes, for namespace fields (e.g. of a model file's digest or a tenant name). */
PAGODA_KV_API uint64_t pagoda_kv_hash_bytes(const void* data, size_t size, uint64_t seed);

PAGODA_KV_API pagoda_kv_status pagoda_kv_create(const pagoda_kv_config* config, pagoda_kv_cache** out);
/* Releases live matches, frees every sequence and the pool. NULL is ignored. */
PAGODA_KV_API void pagoda_kv_destroy(pagoda_kv_cache* cache);

/* Longest cached prefix of tokens[0, n) in ns, at most (n - 1) / block_size blocks; pins its
 * blocks (never evicted) until adopted or released. *num_tokens: its length (may be 0). */
PAGODA_KV_API pagoda_kv_status pagoda_kv_match_prefix(pagoda_kv_cache* cache, const int32_t* tokens, size_t n,
                                                      const pagoda_kv_namespace* ns, pagoda_kv_match** out,
                                                      int64_t* num_tokens);
PAGODA_KV_API pagoda_kv_status pagoda_kv_match_release(pagoda_kv_cache* cache, pagoda_kv_match* match);

/* A new empty sequence that may grow to max_tokens; priority matters to PAGODA_KV_PRIORITY. */
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_add(pagoda_kv_cache* cache, int64_t max_tokens,
                                                 const pagoda_kv_namespace* ns, int32_t priority,
                                                 pagoda_kv_seq* out);
/* Gives an empty sequence the matched blocks (consumes the match, even on failure). Same ns. */
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_adopt(pagoda_kv_cache* cache, pagoda_kv_seq seq, pagoda_kv_match* match);
/* Grows seq by n tokens: slots_out[i] = slot of position length + i (n entries). At most one
 * copy is written to *copy_out (*num_copies = 0 or 1): do it (pagoda_kv_copy_block) before
 * writing KV. OUT_OF_BLOCKS changes nothing. */
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_append(pagoda_kv_cache* cache, pagoda_kv_seq seq, const int32_t* tokens,
                                                    size_t n, int64_t* slots_out, pagoda_kv_block_copy* copy_out,
                                                    int32_t* num_copies);
/* Blocks an append of n tokens would need; nothing changes. */
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_blocks_needed(pagoda_kv_cache* cache, pagoda_kv_seq seq, int64_t n,
                                                           int64_t* blocks);
/* The KV of every appended token is written: registers the full blocks for prefix hits. */
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_commit(pagoda_kv_cache* cache, pagoda_kv_seq seq);
/* A new sequence sharing every block of a committed seq (copy-on-write). */
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_fork(pagoda_kv_cache* cache, pagoda_kv_seq seq, pagoda_kv_seq* child);
/* Keeps the first new_length tokens. */
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_truncate(pagoda_kv_cache* cache, pagoda_kv_seq seq, int64_t new_length);
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_free(pagoda_kv_cache* cache, pagoda_kv_seq seq);
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_length(pagoda_kv_cache* cache, pagoda_kv_seq seq, int64_t* length,
                                                    int64_t* num_computed);
/* Copies up to capacity block ids into out; *num_blocks is the table's size (may exceed
 * capacity: call again with more room). */
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_block_table(pagoda_kv_cache* cache, pagoda_kv_seq seq, int32_t* out,
                                                         size_t capacity, size_t* num_blocks);
/* slots_out[i] = slot of position begin + i, for [begin, begin + n) within [0, length). */
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_slot_mapping(pagoda_kv_cache* cache, pagoda_kv_seq seq, int64_t begin,
                                                          int64_t n, int64_t* slots_out);

/* The bytes of one block of one layer: which = 0 for K, 1 for V (kernels' KV format). */
PAGODA_KV_API pagoda_kv_status pagoda_kv_block_memory(pagoda_kv_cache* cache, int32_t block, int32_t layer,
                                                      int32_t which, void** data, size_t* bytes);
PAGODA_KV_API pagoda_kv_status pagoda_kv_copy_block(pagoda_kv_cache* cache, int32_t src, int32_t dst);
/* Ref count (0 when free or cached) and state: 0 free, 1 in use, 2 cached. */
PAGODA_KV_API pagoda_kv_status pagoda_kv_block_state(pagoda_kv_cache* cache, int32_t block, int32_t* ref_count,
                                                     int32_t* state);

PAGODA_KV_API pagoda_kv_status pagoda_kv_get_stats(pagoda_kv_cache* cache, pagoda_kv_stats* out);
/* Verifies every invariant of the pool and the tables (for tests): a violation is a library
 * bug and aborts the process with its file and line. */
PAGODA_KV_API pagoda_kv_status pagoda_kv_check_integrity(pagoda_kv_cache* cache);

/* ---- Tiers (ABI 1.1; see the top) ---- */

typedef enum pagoda_kv_tier_kind { PAGODA_KV_TIER_HOST = 0, PAGODA_KV_TIER_DISK = 1 } pagoda_kv_tier_kind;

typedef struct pagoda_kv_tier_config {
  uint32_t struct_size;        /* sizeof(pagoda_kv_tier_config) */
  int32_t kind;                /* pagoda_kv_tier_kind */
  int64_t capacity_bytes;      /* the most the tier may hold (whole block records) */
  const char* dir;             /* DISK: an existing writable directory (records are kept there) */
  int32_t write_through;       /* nonzero: every committed full block is written at once */
  uint64_t model_fingerprint;  /* DISK: the namespace fields every record found in dir must */
  uint64_t kv_format;          /* carry to be adopted at attach (others are ignored) */
} pagoda_kv_tier_config;

typedef struct pagoda_kv_tier_stats {
  uint32_t struct_size;        /* set by the caller: sizeof(pagoda_kv_tier_stats) */
  char name[16];               /* "host", "disk" */
  int32_t enabled;             /* 0 once the tier has stopped after a fault */
  int64_t capacity_blocks, used_blocks;
  int64_t lookups, lookup_hit_blocks;
  int64_t offloaded_blocks;    /* put from the pool (eviction or write-through) */
  int64_t demoted_blocks;      /* put from the tier above (its eviction) */
  int64_t loaded_blocks;       /* read into the pool by pagoda_kv_seq_load */
  int64_t failed_loads;        /* blocks that failed to load (miss, corrupt record, fault) */
  int64_t bytes_written, bytes_read;
  int64_t evictions, corrupt_records, faults;
} pagoda_kv_tier_stats;

/* Appends a tier below the others (at most 4); *tier_index (may be NULL) is its index. */
PAGODA_KV_API pagoda_kv_status pagoda_kv_tier_attach(pagoda_kv_cache* cache, const pagoda_kv_tier_config* config,
                                                     int32_t* tier_index);
PAGODA_KV_API pagoda_kv_status pagoda_kv_num_tiers(pagoda_kv_cache* cache, int32_t* num_tiers);
PAGODA_KV_API pagoda_kv_status pagoda_kv_get_tier_stats(pagoda_kv_cache* cache, int32_t tier, pagoda_kv_tier_stats* out);
/* Evicts every cached block that no sequence or match holds; with tiers, they are offloaded.
 * *num_blocks (may be NULL): blocks evicted. */
PAGODA_KV_API pagoda_kv_status pagoda_kv_evict_cached(pagoda_kv_cache* cache, int64_t* num_blocks);
/* Where each whole block of tokens[0, n) before the last token would come from, in chain order,
 * up to the first block found nowhere: where_out[i] = 0 for the pool, 1 + t for tier t.
 * *num_blocks: how many hit (may exceed capacity: the rest are not written). Changes nothing in
 * the pool (a tier counts the lookup). */
PAGODA_KV_API pagoda_kv_status pagoda_kv_locate(pagoda_kv_cache* cache, const int32_t* tokens, size_t n,
                                                const pagoda_kv_namespace* ns, int32_t* where_out, size_t capacity,
                                                size_t* num_blocks);
/* For a sequence whose tokens[0, length) are computed (after adopt or commit; length a whole
 * number of blocks), loads the next whole blocks of tokens[0, n) before the last token that the
 * tiers hold, as far as they are consecutive. *loaded_tokens: tokens added (0: none held, or
 * no room: OUT_OF_BLOCKS is never returned, the engine computes them instead). tokens[0, length)
 * must be the sequence's own. */
PAGODA_KV_API pagoda_kv_status pagoda_kv_seq_load(pagoda_kv_cache* cache, pagoda_kv_seq seq, const int32_t* tokens,
                                                  size_t n, int64_t* loaded_tokens);

#ifdef __cplusplus
}
#endif

#endif /* PAGODA_KV_CACHE_H_ */
