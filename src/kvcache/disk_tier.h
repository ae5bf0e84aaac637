// DiskTier: the SSD tier (`--kv-disk-dir DIR --kv-disk-mem 20G`), a kvcache::Tier (tier.h) over
// BlockRecords (block_record.h) in a few large preallocated files, through io_uring.
//
// Layout. Every block record of the pool's KvLayout has the same size, so the directory holds
// fixed-size slots: slot_bytes = record_bytes rounded up to 4 KiB (kIoAlign), slot s at offset
// (s % slots_per_file) x slot_bytes of file DIR/kv-slots-NNNN.pgkv, NNNN = s / slots_per_file
// (files of at most `file_bytes`). A slot holds one whole record from its first byte (no other
// header: a record names itself), then zeros. The files are preallocated at create() (fallocate),
// so the disk space is taken once and a full disk shows at start-up, not in the step loop.
// DIR/kv-slots.lock (flock) keeps a second process off the directory.
//
// Few large requests. Slots are handed out in runs of consecutive free slots (disk_slots.h), so
// the blocks of one put (a chain, root first) land in consecutive slots; staging buffers are
// handed out the same way. Any items whose slots and buffers are both consecutive travel in one
// request (up to max_request_bytes): a chain written together is written, and read back, with
// one request per max_request_bytes.
//
// Visible only when whole. A put encodes its record into a staging buffer at once (the caller's
// bytes are free when put returns), then: (1) writes the whole record with its magic zeroed (on
// disk this is not a record: no reader can take it for one), (2) when that completes, writes the
// first 4 KiB again with the magic, (3) when that completes, enters the slot in the index. A
// crash (SIGKILL) leaves each slot either as it was, or a record without magic (ignored), or the
// whole record. Power loss is not promised (no fsync per write); the checksum catches a torn one.
//
// Read verification. get() reads records into bounce buffers and, per record, runs
// decode_block_record (sizes, XXH3 checksum) and check_block_record (hash, namespace, shape,
// format) before a single byte is copied into the caller's pool block. A record that fails is
// dropped (out of the index; a zero page written over its header), counted in corrupt_records,
// and the get fails from that block on (num_ok), so the caller recomputes.
//
// Start-up. The index is rebuilt from the files: the first page of every slot (whole slots, in
// large reads, when slots are small) is read through the backend and parsed with
// peek_block_record. Adopted: records of this layout's shape and format and of the expected
// model fingerprint and KV format key (any cache salt; the block hash already covers it).
// Dropped, i.e. the slot is free space and is overwritten as the tier writes: records of another
// model, KV format, block size or shape; headers that do not parse (a foreign or bit-flipped
// file); records without magic (an interrupted write); records cut off by a truncated file;
// duplicates of a hash already adopted. The adopted records' hashes, parents, namespaces and
// token ids are kept until take_found_blocks() or the first poll() (KV events). Nothing is trusted beyond its header until it is read,
// and every read verifies the whole record. Files of this naming beyond the configured capacity
// are deleted; other files in DIR are never touched.
//
// Eviction. The tier's capacity is its slots (capacity_bytes / slot_bytes). A put that needs
// slots takes free ones, else evicts ready, unpinned slots by `eviction` (priority, then least
// recently used; gets and puts touch). With an eviction callback set (the stack demotes to the
// next tier) a victim is first read and verified, handed to the callback from poll(), then freed;
// the put waits (never the caller) for those slots. A slot being read or written is never evicted
// or overwritten (slot states: disk_slots.h).
//
// Faults. An I/O error (EIO, ENOSPC, any other errno) or a transfer that makes no progress at
// run time disables the tier: enabled() turns false with disabled_reason(), one warning is
// logged, faults is counted, ops in flight fail as their I/O finishes, and every later op
// answers at once as a miss. A short transfer that makes progress is resubmitted for the rest.
//
// Threads: driven from one thread (Tier's rule). The I/O backend may use its own (kernel or
// I/O threads); verification and copies run in poll() on the caller's thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/clock.h"
#include "core/log.h"
#include "kvcache/disk_io.h"
#include "kvcache/disk_slots.h"
#include "kvcache/eviction.h"
#include "kvcache/tier.h"

namespace pagoda::kvcache {

struct DiskTierOptions {
  std::string dir;                 // --kv-disk-dir: an existing, writable directory
  int64_t capacity_bytes = 0;      // --kv-disk-mem: the most the slot files take
  KvLayout layout;                 // the pool's: every record has its shape and format
  uint64_t model_fingerprint = 0;  // KvNamespace parts every adopted record must carry
  uint64_t kv_format = 0;
  EvictionPolicyKind eviction = EvictionPolicyKind::kPriority;  // the pool's priority rules
  int64_t write_buffer_bytes = int64_t{64} << 20;  // staging for records being written
  int64_t min_write_blocks = 0;    // ... but room for at least this many records (a few steps' commits)
  int64_t read_buffer_bytes = int64_t{64} << 20;   // bounce buffers for reads being verified
  int64_t max_request_bytes = int64_t{8} << 20;    // coalesced requests are cut at this size
  int64_t file_bytes = int64_t{1} << 30;           // each slot file is at most this large
  int queue_depth = 64;            // I/O requests in flight
  bool direct_io = true;           // O_DIRECT where the file system allows it
};

// What create() found and chose; describe() prints it.
struct DiskTierInfo {
  std::string backend;             // "io_uring" or "threads" (io_uring refused)
  bool direct_io = false;          // O_DIRECT in use
  int64_t record_bytes = 0, slot_bytes = 0;
  int64_t num_slots = 0, slots_per_file = 0, num_files = 0;
  // Start-up scan of the directory.
  TransferSample probe_read;       // one slot read back at start-up, timed with the tier's clock
  int64_t records_found = 0;       // adopted into the index
  int64_t dropped_foreign = 0;     // another model, KV format, block size or shape
  int64_t dropped_unreadable = 0;  // a header that does not parse
  int64_t dropped_incomplete = 0;  // written without its magic (an interrupted write)
  int64_t dropped_truncated = 0;   // cut off by the end of a truncated file
  int64_t dropped_duplicate = 0;   // a second record of a hash already adopted
  int64_t files_removed = 0;       // slot files beyond the configured capacity
  int64_t scan_ns = 0;
};

struct DiskIoStats {
  int64_t read_requests = 0;       // submitted to the backend (scan excluded)
  int64_t write_requests = 0;      // body, commit and invalidation writes
  int64_t short_transfers = 0;     // resubmitted for the rest
};

// DIR/kv-slots-NNNN.pgkv, the file holding slots [file x slots_per_file, +slots_per_file).
std::string disk_tier_file_path(const std::string& dir, int64_t file);

class DiskTier final : public Tier {
 public:
  // Checks the directory (exists, writable, not full, not locked), sets up the files and
  // rebuilds the index; every problem is a Status a user can act on. `io` nullptr: io_uring,
  // or I/O threads where io_uring is refused. clock and logger must outlive the tier.
  static Result<std::unique_ptr<DiskTier>> create(const DiskTierOptions& options, const Clock& clock,
                                                  const Logger& logger, std::unique_ptr<IoBackend> io = nullptr);
  ~DiskTier() override;  // waits for the I/O in flight, then syncs and closes the files

  std::string_view name() const override { return "disk"; }
  std::string_view medium() const override { return "DISK"; }
  std::string_view memory() const override { return "disk"; }
  bool enabled() const override { return enabled_; }
  std::string disabled_reason() const override { return disabled_reason_; }

  TierOpId lookup(std::span<const BlockHash> chain) override;
  TierOpId put(std::span<const TierPut> blocks) override;
  TierOpId get(std::span<const TierGet> blocks) override;
  void erase(std::span<const BlockHash> hashes) override;
  void poll(std::vector<TierCompletion>& out) override;

  TierStats stats() const override;
  void set_eviction_callback(TierEvictionCallback callback) override { on_evict_ = std::move(callback); }
  void set_removed_callback(TierRemovedCallback callback) override { slots_.set_removed_callback(std::move(callback)); }
  FoundBlocks take_found_blocks() override;
  TransferSample take_transfer_sample() override { return std::exchange(info_.probe_read, TransferSample{}); }

  const DiskTierInfo& info() const { return info_; }
  const DiskIoStats& io_stats() const { return io_stats_; }
  // One start-up line: directory, capacity in slots/blocks/tokens, I/O mode, what the scan found.
  std::string describe() const;
  // Aborts unless slots, buffers, requests and ops agree (tests call it after every step).
  void check_integrity() const;

 private:
  enum class ItemState : uint8_t { kPending, kOk, kFailed };
  enum class RequestKind : uint8_t { kBody, kCommit, kRead, kDemote, kInvalidate };
  struct Item {                      // one block of an op
    BlockHash hash = 0;
    int32_t priority = 0;            // put
    KvNamespace ns;                  // get: the namespace the record must carry
    std::span<int32_t> tokens_out;   // get: [block_size], caller-owned
    int64_t first_dest = 0;          // get: its 2 x n_layer segments start at Op::dests[first_dest]
    int64_t slot = -1;
    int64_t unit = -1;               // put: its staging buffer
    ItemState state = ItemState::kPending;
  };
  struct Op {
    TierOpKind kind = TierOpKind::kLookup;
    int64_t submit_ns = 0;
    std::vector<Item> items;         // [num_items] chain order
    std::vector<ByteSpan> dests;     // get: [num_items x 2 n_layer] destination segments
    int64_t num_pending = 0;         // items neither ok nor failed
    int64_t slots_needed = 0;        // put: staged items still waiting for a slot
    int64_t next_unassigned = 0;     // put: first item that may still need a slot
    int64_t bytes = 0;
    Status status;                   // the first failure
  };
  struct Request {                   // one I/O request, queued or in flight; tag = its index
    RequestKind kind = RequestKind::kRead;
    TierOpId op = 0;                 // 0: no op (demotion, invalidation)
    int64_t first_item = 0;          // items [first_item, +num_slots) of the op
    int64_t first_slot = 0, num_slots = 0;
    int64_t unit = -1;               // first staging (writes) or bounce (reads) unit; -1: zero page
    int64_t done = 0;                // bytes moved so far
    int retries = 0;                 // EINTR/EAGAIN resubmissions
    IoRequest io;                    // the whole transfer
    bool in_use = false;
    static Request of(RequestKind kind, TierOpId op, int64_t first_item, int64_t first_slot, int64_t num_slots,
                      int64_t unit) {
      Request r;
      r.kind = kind;
      r.op = op;
      r.first_item = first_item;
      r.first_slot = first_slot;
      r.num_slots = num_slots;
      r.unit = unit;
      return r;
    }
  };
  struct ReadJob {                   // consecutive slots waiting for bounce buffers
    TierOpId op = 0;                 // 0: a demotion (one slot)
    int64_t first_item = 0, first_slot = 0, count = 0;
  };
  struct OpenFiles {
    int lock_fd = -1;
    std::vector<int> fds;            // [num_files]
    std::vector<int64_t> sizes;      // [num_files] bytes each file had before create() sized it
  };

  DiskTier(const DiskTierOptions& options, const Clock& clock, const Logger& logger, std::unique_ptr<IoBackend> io,
           DiskTierInfo info, OpenFiles files, AlignedBuffer write_buf, AlignedBuffer read_buf, AlignedBuffer zero_page);
  Status scan(std::span<const int64_t> file_sizes);    // disk_tier_scan.cpp

  int fd_of(int64_t slot) const { return fds_[static_cast<size_t>(slot / info_.slots_per_file)]; }
  int64_t offset_of(int64_t slot) const { return slot % info_.slots_per_file * info_.slot_bytes; }
  uint8_t* write_unit(int64_t unit) { return write_buf_.data() + unit * info_.slot_bytes; }
  uint8_t* read_unit(int64_t unit) { return read_buf_.data() + unit * info_.slot_bytes; }
  bool same_file(int64_t a, int64_t b) const { return a / info_.slots_per_file == b / info_.slots_per_file; }

  // Ops (disk_tier.cpp).
  TierOpId complete_now(TierOpKind kind, int64_t num_items, int64_t num_ok, Status status);
  TierOpId refuse(TierOpKind kind, int64_t num_items);  // disabled: a miss, at once
  TierOpId new_op(TierOpKind kind, int64_t num_items, Op*& op);
  void resolve(TierOpId id, Item& item, bool ok, const Status& why = Status::ok());
  void flush_finished();
  Status check_put(const TierPut& block) const;
  void stage_puts(TierOpId id, Op& op, std::span<const TierPut> blocks);
  void make_room(TierOpId id, Op& op);
  void assign_slots();
  void start_reads();
  // I/O (disk_tier_io.cpp).
  void queue_request(Request request);
  void queue_write(Request request);
  void invalidate(int64_t slot);
  void submit_requests();
  void handle_result(const IoResult& result);
  void reap_results();  // handles every completed I/O now (never waits)
  void complete_body(const Request& r);
  void complete_commit(const Request& r);
  void complete_read(const Request& r);
  void complete_demote(const Request& r);
  void fail_request(const Request& r, const Status& why);
  void fault(const Request& r, int64_t res);
  void disable(const std::string& reason);
  void count_corrupt(int64_t slot, const Status& why);
  // A decoded record of this layout, hash and namespace (ns nullptr: any salt, this model).
  Status verify(ConstByteSpan bytes, const KvNamespace* ns, BlockHash hash, BlockRecordView& view) const;

  DiskTierOptions options_;
  const Clock& clock_;
  const Logger& logger_;
  std::unique_ptr<IoBackend> io_;
  DiskTierInfo info_;
  int lock_fd_;
  std::vector<int> fds_;               // [num_files] slot files
  SlotTable slots_;                    // [num_slots]
  AlignedBuffer write_buf_;            // [write units, slot_bytes] records being written
  RunAllocator write_units_;
  AlignedBuffer read_buf_;             // [read units, slot_bytes] records being read and verified
  RunAllocator read_units_;
  AlignedBuffer zero_page_;            // [kIoAlign] zeros, written over a dropped record's header
  std::unordered_map<TierOpId, Op> ops_;   // ops not yet finished
  std::vector<Request> requests_;      // tag -> request
  std::vector<int64_t> free_requests_; // unused entries of requests_
  std::deque<int64_t> to_submit_;      // requests waiting for room in the backend
  std::deque<ReadJob> read_queue_;     // reads waiting for bounce buffers
  std::deque<TierOpId> waiting_puts_;  // puts waiting for slots (FIFO)
  int64_t slots_owed_ = 0;             // slots the waiting puts still need
  // Blocks of waiting puts not yet given a slot -> erased since (written, then dropped).
  std::unordered_map<BlockHash, bool> staged_;
  std::vector<TierOpId> finished_;     // ops whose items are all resolved, to report
  std::vector<TierCompletion> done_;   // reported, not yet polled
  std::vector<IoResult> results_;      // poll scratch
  std::vector<IoRequest> batch_;       // submit scratch
  TierEvictionCallback on_evict_;
  FoundBlocks found_;                  // adopted at start-up, until taken or the first poll
  TierStats stats_;
  DiskIoStats io_stats_;
  TierOpId next_op_ = 1;
  bool enabled_ = true;
  bool closing_ = false;               // in the destructor: finish writes, drop reads
  std::string disabled_reason_;
};

}  // namespace pagoda::kvcache
