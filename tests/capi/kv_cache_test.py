#!/usr/bin/env python3
"""libpagoda_kv.so from Python through ctypes (no pip): an engine's whole protocol against the C
API, and (ABI 1.1) tiers: a host tier over an SSD tier, demotion, locate and load.
Usage: kv_cache_test.py PATH/TO/libpagoda_kv.so. Prints "N passed, M failed"."""
import ctypes as C
import random
import shutil
import sys
import tempfile

lib = C.CDLL(sys.argv[1])

OK, INVALID, OUT_OF_BLOCKS, NOT_FOUND, ABI_MISMATCH = 0, 1, 2, 3, 4
F32, INT8 = 0, 5
LRU, LFU, PRIORITY = 0, 1, 2


class Config(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32), ("n_layer", C.c_int32),
                ("n_kv_head", C.c_int32), ("head_dim", C.c_int32), ("block_size", C.c_int32),
                ("dtype", C.c_int32), ("eviction", C.c_int32), ("num_blocks", C.c_int64),
                ("memory_bytes", C.c_int64)]


class Namespace(C.Structure):
    _fields_ = [("model_fingerprint", C.c_uint64), ("kv_format", C.c_uint64), ("cache_salt", C.c_uint64)]


class BlockCopy(C.Structure):
    _fields_ = [("src_block", C.c_int32), ("dst_block", C.c_int32)]


class Stats(C.Structure):
    _fields_ = [("struct_size", C.c_uint32)] + [(n, C.c_int64) for n in (
        "num_blocks", "num_free", "num_in_use", "num_cached", "num_sequences", "num_lookups", "num_hit_tokens",
        "num_missed_tokens", "num_evictions", "num_blocks_allocated", "num_cow_copies", "num_committed_blocks",
        "bytes_per_block")]


class TierConfig(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("kind", C.c_int32), ("capacity_bytes", C.c_int64),
                ("dir", C.c_char_p), ("write_through", C.c_int32), ("model_fingerprint", C.c_uint64),
                ("kv_format", C.c_uint64)]


class TierStats(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("name", C.c_char * 16), ("enabled", C.c_int32)] + [
        (n, C.c_int64) for n in ("capacity_blocks", "used_blocks", "lookups", "lookup_hit_blocks", "offloaded_blocks",
                                 "demoted_blocks", "loaded_blocks", "failed_loads", "bytes_written", "bytes_read",
                                 "evictions", "corrupt_records", "faults")]


HOST, DISK = 0, 1
P = C.POINTER
cache_p, match_p = C.c_void_p, C.c_void_p
lib.pagoda_kv_abi_version.restype = C.c_uint32
lib.pagoda_kv_last_error.restype = C.c_char_p
lib.pagoda_kv_status_name.restype = C.c_char_p
lib.pagoda_kv_hash_bytes.restype = C.c_uint64
lib.pagoda_kv_hash_bytes.argtypes = [C.c_char_p, C.c_size_t, C.c_uint64]
lib.pagoda_kv_create.argtypes = [P(Config), P(cache_p)]
lib.pagoda_kv_destroy.argtypes = [cache_p]
lib.pagoda_kv_match_prefix.argtypes = [cache_p, P(C.c_int32), C.c_size_t, P(Namespace), P(match_p), P(C.c_int64)]
lib.pagoda_kv_match_release.argtypes = [cache_p, match_p]
lib.pagoda_kv_seq_add.argtypes = [cache_p, C.c_int64, P(Namespace), C.c_int32, P(C.c_int64)]
lib.pagoda_kv_seq_adopt.argtypes = [cache_p, C.c_int64, match_p]
lib.pagoda_kv_seq_append.argtypes = [cache_p, C.c_int64, P(C.c_int32), C.c_size_t, P(C.c_int64), P(BlockCopy),
                                     P(C.c_int32)]
lib.pagoda_kv_seq_blocks_needed.argtypes = [cache_p, C.c_int64, C.c_int64, P(C.c_int64)]
lib.pagoda_kv_seq_commit.argtypes = [cache_p, C.c_int64]
lib.pagoda_kv_seq_fork.argtypes = [cache_p, C.c_int64, P(C.c_int64)]
lib.pagoda_kv_seq_truncate.argtypes = [cache_p, C.c_int64, C.c_int64]
lib.pagoda_kv_seq_free.argtypes = [cache_p, C.c_int64]
lib.pagoda_kv_seq_length.argtypes = [cache_p, C.c_int64, P(C.c_int64), P(C.c_int64)]
lib.pagoda_kv_seq_block_table.argtypes = [cache_p, C.c_int64, P(C.c_int32), C.c_size_t, P(C.c_size_t)]
lib.pagoda_kv_seq_slot_mapping.argtypes = [cache_p, C.c_int64, C.c_int64, C.c_int64, P(C.c_int64)]
lib.pagoda_kv_block_memory.argtypes = [cache_p, C.c_int32, C.c_int32, C.c_int32, P(C.c_void_p), P(C.c_size_t)]
lib.pagoda_kv_copy_block.argtypes = [cache_p, C.c_int32, C.c_int32]
lib.pagoda_kv_block_state.argtypes = [cache_p, C.c_int32, P(C.c_int32), P(C.c_int32)]
lib.pagoda_kv_get_stats.argtypes = [cache_p, P(Stats)]
lib.pagoda_kv_check_integrity.argtypes = [cache_p]
lib.pagoda_kv_abi_minor.restype = C.c_uint32
lib.pagoda_kv_tier_attach.argtypes = [cache_p, P(TierConfig), P(C.c_int32)]
lib.pagoda_kv_num_tiers.argtypes = [cache_p, P(C.c_int32)]
lib.pagoda_kv_get_tier_stats.argtypes = [cache_p, C.c_int32, P(TierStats)]
lib.pagoda_kv_evict_cached.argtypes = [cache_p, P(C.c_int64)]
lib.pagoda_kv_locate.argtypes = [cache_p, P(C.c_int32), C.c_size_t, P(Namespace), P(C.c_int32), C.c_size_t,
                                 P(C.c_size_t)]
lib.pagoda_kv_seq_load.argtypes = [cache_p, C.c_int64, P(C.c_int32), C.c_size_t, P(C.c_int64)]

passed = failed = 0


def expect(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("failed:", what, "| last error:", lib.pagoda_kv_last_error().decode(), file=sys.stderr)


class KvCache:
    """The thin wrapper an engine in Python would write."""

    def __init__(self, num_blocks, block_size=16, dtype=F32, eviction=LRU, n_layer=2):
        c = Config(C.sizeof(Config), lib.pagoda_kv_abi_version(), n_layer, 2, 8, block_size, dtype, eviction,
                   num_blocks, 0)
        self.h = cache_p()
        status = lib.pagoda_kv_create(C.byref(c), C.byref(self.h))
        if status != OK:
            raise RuntimeError(lib.pagoda_kv_last_error().decode())
        self.block_size = block_size

    def close(self):
        lib.pagoda_kv_destroy(self.h)

    def match(self, tokens, ns):
        arr = (C.c_int32 * len(tokens))(*tokens)
        m, n = match_p(), C.c_int64()
        expect(lib.pagoda_kv_match_prefix(self.h, arr, len(tokens), C.byref(ns), C.byref(m), C.byref(n)) == OK, "match")
        return m, n.value

    def add(self, max_tokens, ns, priority=0):
        s = C.c_int64()
        expect(lib.pagoda_kv_seq_add(self.h, max_tokens, C.byref(ns), priority, C.byref(s)) == OK, "add")
        return s.value

    def append(self, seq, tokens):
        arr = (C.c_int32 * max(1, len(tokens)))(*tokens)
        slots = (C.c_int64 * max(1, len(tokens)))()
        copy, n = BlockCopy(), C.c_int32()
        status = lib.pagoda_kv_seq_append(self.h, seq, arr, len(tokens), slots, C.byref(copy), C.byref(n))
        copies = [(copy.src_block, copy.dst_block)] if status == OK and n.value == 1 else []
        return status, list(slots)[:len(tokens)], copies

    def table(self, seq):
        n = C.c_size_t()
        lib.pagoda_kv_seq_block_table(self.h, seq, None, 0, C.byref(n))
        out = (C.c_int32 * max(1, n.value))()
        expect(lib.pagoda_kv_seq_block_table(self.h, seq, out, n.value, C.byref(n)) == OK, "block table")
        return list(out)[:n.value]

    def length(self, seq):
        length, computed = C.c_int64(), C.c_int64()
        expect(lib.pagoda_kv_seq_length(self.h, seq, C.byref(length), C.byref(computed)) == OK, "length")
        return length.value, computed.value

    def stats(self):
        s = Stats()
        s.struct_size = C.sizeof(Stats)
        expect(lib.pagoda_kv_get_stats(self.h, C.byref(s)) == OK, "stats")
        return s

    def block(self, block, layer, which):
        p, n = C.c_void_p(), C.c_size_t()
        expect(lib.pagoda_kv_block_memory(self.h, block, layer, which, C.byref(p), C.byref(n)) == OK, "block memory")
        return (C.c_ubyte * n.value).from_address(p.value)

    def serve(self, tokens, ns, priority=0):
        """Admission as an engine does it: match, add, adopt, append the rest, commit."""
        m, cached = self.match(tokens, ns)
        seq = self.add(len(tokens) + 32, ns, priority)
        expect(lib.pagoda_kv_seq_adopt(self.h, seq, m) == OK, "adopt")
        status, slots, copies = self.append(seq, tokens[cached:])
        expect(status == OK and not copies, "append of a prompt")
        expect(lib.pagoda_kv_seq_commit(self.h, seq) == OK, "commit")
        return seq, cached, slots

    def intact(self):
        expect(lib.pagoda_kv_check_integrity(self.h) == OK, "integrity")


# ABI checks.
expect(lib.pagoda_kv_abi_version() == 1, "ABI version 1")
bad = Config(C.sizeof(Config) - 8, 1, 2, 2, 8, 16, F32, LRU, 8, 0)
h = cache_p()
expect(lib.pagoda_kv_create(C.byref(bad), C.byref(h)) == ABI_MISMATCH, "an old struct size is refused")
expect(b"struct_size" in lib.pagoda_kv_last_error(), "the error names the field")
expect(lib.pagoda_kv_status_name(OUT_OF_BLOCKS) == b"out of blocks", "status names")

ns = Namespace(lib.pagoda_kv_hash_bytes(b"model-a", 7, 0), 7, 0)
tenant = Namespace(ns.model_fingerprint, 7, lib.pagoda_kv_hash_bytes(b"tenant", 6, 0))

# Prefix caching: slots follow the block table; a second prompt with the same start hits.
kv = KvCache(num_blocks=16)
prompt = list(range(500, 550))  # 3 full blocks + 2
a, cached, slots = kv.serve(prompt, ns)
expect(cached == 0, "a cold prompt misses")
table = kv.table(a)
expect(len(table) == 4, "4 blocks for 50 tokens")
expect(all(slots[p] == table[p // 16] * 16 + p % 16 for p in range(50)), "slot = table[p / B] * B + p % B")
mapping = (C.c_int64 * 10)()
expect(lib.pagoda_kv_seq_slot_mapping(kv.h, a, 40, 10, mapping) == OK and list(mapping) == slots[40:50], "slot mapping")
k0 = kv.block(table[0], 1, 1)
C.memset(C.addressof(k0), 0x33, len(k0))
expect(lib.pagoda_kv_seq_free(kv.h, a) == OK, "free")
s = kv.stats()
expect((s.num_cached, s.num_in_use, s.num_free) == (3, 0, 13), "3 full blocks stay cached")
b, cached, _ = kv.serve(prompt[:40] + [1, 2, 3], ns)
expect(cached == 32, "2 blocks hit (the third differs)")
expect(kv.table(b)[0] == table[0] and kv.block(table[0], 1, 1)[5] == 0x33, "the hit is the same block, its KV intact")
_, other = kv.match(prompt, tenant)
expect(other == 0, "another tenant's salt never hits")
kv.intact()

# Fork: shared blocks, one copy on the first write into the shared partial block.
child = C.c_int64()
expect(lib.pagoda_kv_seq_fork(kv.h, b, C.byref(child)) == OK, "fork")
ref, state = C.c_int32(), C.c_int32()
lib.pagoda_kv_block_state(kv.h, kv.table(b)[1], C.byref(ref), C.byref(state))
expect((ref.value, state.value) == (2, 1), "a forked block has ref 2")
status, slot, copies = kv.append(child.value, [9])
expect(status == OK and len(copies) == 1, "copy on write")
expect(lib.pagoda_kv_copy_block(kv.h, copies[0][0], copies[0][1]) == OK, "do the copy")
expect(slot[0] == copies[0][1] * 16 + 43 % 16, "the child's slot is in its own copy")
expect(lib.pagoda_kv_seq_fork(kv.h, child.value, C.byref(child)) == INVALID, "fork of an uncommitted sequence")
kv.intact()

# Errors instead of aborts.
expect(lib.pagoda_kv_seq_free(kv.h, 999) == NOT_FOUND, "unknown sequence")
expect(lib.pagoda_kv_seq_truncate(kv.h, b, 10**6) == INVALID, "truncate past the end")
expect(lib.pagoda_kv_copy_block(kv.h, 0, 99) == INVALID, "block out of range")
expect(lib.pagoda_kv_block_memory(kv.h, 0, 5, 0, C.byref(C.c_void_p()), C.byref(C.c_size_t())) == INVALID, "layer out of range")
m, _ = kv.match(prompt, ns)
expect(lib.pagoda_kv_seq_adopt(kv.h, b, m) == INVALID, "adopt into a sequence that holds tokens")
expect(lib.pagoda_kv_match_release(kv.h, m) == NOT_FOUND, "the match was consumed")
expect(lib.pagoda_kv_seq_truncate(kv.h, b, 20) == OK and kv.length(b) == (20, 20), "truncate")
before = kv.length(child.value)
status, _, _ = kv.append(child.value, list(range(400)))
expect(status == OUT_OF_BLOCKS and kv.length(child.value) == before, "out of blocks changes nothing")
kv.intact()
kv.close()

# A randomised engine loop: many prompts with shared prefixes over a small pool; the pool evicts,
# every answer is consistent and the invariants hold after each step.
rng = random.Random(7)
kv = KvCache(num_blocks=24, eviction=LFU)
prefixes = [[rng.randrange(1000) for _ in range(rng.choice([16, 32, 48]))] for _ in range(4)]
live = []
for step in range(300):
    if live and (len(live) > 3 or rng.random() < 0.4):
        seq = live.pop(rng.randrange(len(live)))
        expect(lib.pagoda_kv_seq_free(kv.h, seq) == OK, "free in loop")
    else:
        tokens = rng.choice(prefixes) + [rng.randrange(1000) for _ in range(rng.randrange(1, 20))]
        m, cached = kv.match(tokens, ns)
        needed = (len(tokens) - cached + 15) // 16
        seq = kv.add(len(tokens), ns)
        expect(lib.pagoda_kv_seq_adopt(kv.h, seq, m) == OK, "adopt in loop")
        status, _, _ = kv.append(seq, tokens[cached:])
        if status == OUT_OF_BLOCKS:
            expect(lib.pagoda_kv_seq_free(kv.h, seq) == OK, "give up")
        else:
            expect(status == OK, "append in loop")
            expect(lib.pagoda_kv_seq_commit(kv.h, seq) == OK, "commit in loop")
            live.append(seq)
    kv.intact()
s = kv.stats()
expect(s.num_evictions > 0 and s.num_hit_tokens > 0, "the loop both hit and evicted")
expect(s.num_free + s.num_in_use + s.num_cached == s.num_blocks, "every block is accounted for")
live_match, _ = kv.match(prefixes[0] + [1], ns)  # left pinned on purpose: destroy releases it
kv.close()

# Tiers (ABI 1.1): a host tier too small for a prompt over an SSD tier. The pool evicts the
# prompt's blocks into the host tier, which demotes them to the disk; locate names the tier of
# each block, and a load brings them back, bytes intact.
expect(lib.pagoda_kv_abi_minor() >= 1, "ABI minor 1: tiers")


def attach(kv, kind, capacity, directory=None):
    c = TierConfig(C.sizeof(TierConfig), kind, capacity, directory, 0, ns.model_fingerprint, ns.kv_format)
    index = C.c_int32(-1)
    status = lib.pagoda_kv_tier_attach(kv.h, C.byref(c), C.byref(index))
    return status, index.value


def tier_stats(kv, tier):
    st = TierStats()
    st.struct_size = C.sizeof(TierStats)
    expect(lib.pagoda_kv_get_tier_stats(kv.h, tier, C.byref(st)) == OK, "tier stats")
    return st


def locate(kv, tokens, namespace):
    arr = (C.c_int32 * len(tokens))(*tokens)
    where, n = (C.c_int32 * 64)(), C.c_size_t()
    expect(lib.pagoda_kv_locate(kv.h, arr, len(tokens), C.byref(namespace), where, 64, C.byref(n)) == OK, "locate")
    return list(where)[:n.value]


disk_dir = tempfile.mkdtemp(prefix="pagoda-capi-disk-")
try:
    kv = KvCache(num_blocks=16)
    expect(attach(kv, HOST, 3 * kv.stats().bytes_per_block) == (OK, 0), "attach a host tier")
    host_blocks = tier_stats(kv, 0).capacity_blocks
    expect(1 <= host_blocks < 3, "a host tier of %d blocks (want 1 or 2)" % host_blocks)
    expect(attach(kv, DISK, 1 << 22, disk_dir.encode()) == (OK, 1), "attach a disk tier below it")
    expect(attach(kv, DISK, 1 << 22, None)[0] == INVALID, "a disk tier needs a directory")
    num = C.c_int32()
    expect(lib.pagoda_kv_num_tiers(kv.h, C.byref(num)) == OK and num.value == 2, "two tiers")
    prompt = [rng.randrange(1000) for _ in range(5 * 16 + 3)]
    seq, cached, _ = kv.serve(prompt, ns)
    expect(cached == 0, "a cold prompt")
    table = kv.table(seq)
    for j in range(5):
        kv.block(table[j], 0, 0)[0] = 0x30 + j  # the KV the engine wrote
    expect(lib.pagoda_kv_seq_free(kv.h, seq) == OK, "free")
    evicted = C.c_int64()
    expect(lib.pagoda_kv_evict_cached(kv.h, C.byref(evicted)) == OK and evicted.value == 5, "evict 5 blocks")
    where = locate(kv, prompt, ns)
    expect(len(where) == 5 and set(where) <= {1, 2} and 2 in where, "in the tiers, some on the disk: %s" % where)
    expect(where.count(1) == host_blocks, "the host tier holds the last ones: %s" % where)
    expect(locate(kv, prompt, tenant) == [], "another namespace finds nothing")
    host, disk = tier_stats(kv, 0), tier_stats(kv, 1)
    expect(host.name == b"host" and disk.name == b"disk", "tier names")
    expect(host.offloaded_blocks == 5 and disk.demoted_blocks == 5 - host_blocks, "offloaded, then demoted")
    expect(disk.used_blocks == 5 - host_blocks and disk.bytes_written > 0, "the disk holds the demoted ones")
    m, cached = kv.match(prompt, ns)
    seq = kv.add(len(prompt) + 16, ns)
    expect(lib.pagoda_kv_seq_adopt(kv.h, seq, m) == OK and cached == 0, "adopt the empty pool match")
    arr = (C.c_int32 * len(prompt))(*prompt)
    loaded = C.c_int64()
    expect(lib.pagoda_kv_seq_load(kv.h, seq, arr, len(prompt), C.byref(loaded)) == OK, "load")
    expect(loaded.value == 5 * 16 and kv.length(seq) == (80, 80), "loaded 5 blocks: %d" % loaded.value)
    table = kv.table(seq)
    expect([kv.block(table[j], 0, 0)[0] for j in range(5)] == [0x30 + j for j in range(5)], "bytes intact")
    expect(locate(kv, prompt, ns) == [0] * 5, "in the pool now")
    host, disk = tier_stats(kv, 0), tier_stats(kv, 1)
    expect(host.loaded_blocks + disk.loaded_blocks == 5 and disk.loaded_blocks == 5 - host_blocks, "loaded from both")
    expect(disk.bytes_read > 0 and disk.corrupt_records == 0 and disk.failed_loads == 0, "disk reads verified")
    status, _, _ = kv.append(seq, prompt[80:])
    expect(status == OK and lib.pagoda_kv_seq_commit(kv.h, seq) == OK, "compute the tail after the load")
    wrong = list(prompt)
    wrong[3] += 1
    warr = (C.c_int32 * len(wrong))(*wrong)
    m2, _ = kv.match(prompt[:17], ns)
    seq2 = kv.add(200, ns)
    expect(lib.pagoda_kv_seq_adopt(kv.h, seq2, m2) == OK, "adopt one block")
    expect(lib.pagoda_kv_seq_load(kv.h, seq2, warr, len(wrong), C.byref(loaded)) == INVALID,
           "tokens that are not the sequence's")
    bad_stats = TierStats()
    bad_stats.struct_size = 8
    expect(lib.pagoda_kv_get_tier_stats(kv.h, 0, C.byref(bad_stats)) == ABI_MISMATCH, "stats struct size")
    kv.intact()
    kv.close()
finally:
    shutil.rmtree(disk_dir, ignore_errors=True)

print(f"{passed} passed, {failed} failed")
sys.exit(0 if failed == 0 else 1)
