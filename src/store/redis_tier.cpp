// RedisTier, the driving thread's side: validation, submit, poll, health and probes.
// The I/O thread's side (executing jobs against Redis) is redis_tier_io.cpp.
#include "store/redis_tier.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace pagoda::store {


namespace {

int shuffle_for(const RedisTierConfig& c) {
  if (c.compression == RedisCompression::kNone || !c.shuffle) return 0;
  switch (c.layout.dtype) {
    case kernels::KvDType::kF16:
    case kernels::KvDType::kBF16: return 2;
    case kernels::KvDType::kF32: return 4;
    default: return 0;  // 8-bit codes and their scales: no planes worth splitting
  }
}

Status validate(const RedisTierConfig& c) {
  if (c.topology.endpoints.empty()) return Status::invalid_argument("redis tier: no servers");
  PAGODA_RETURN_IF_ERROR(c.layout.validate().with_context("redis tier"));
  if (c.ttl_seconds < 0) return Status::invalid_argument("--kv-remote-ttl must be >= 0 seconds");
  if (c.timeouts.connect_ms <= 0 || c.timeouts.io_ms <= 0) return Status::invalid_argument("redis tier: timeouts must be > 0 ms");
  if (c.probe_backoff_initial_ms <= 0 || c.probe_backoff_max_ms < c.probe_backoff_initial_ms) {
    return Status::invalid_argument("redis tier: probe backoff must satisfy 0 < initial <= max");
  }
  if (c.max_redirects < 1) return Status::invalid_argument("redis tier: max_redirects must be >= 1");
  if (c.compression_level < 0) return Status::invalid_argument("redis tier: compression level must be >= 0");
  return Status::ok();
}

void signal_fd(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
}

}  // namespace

RedisTier::RedisTier(RedisTierConfig config, const Clock* clock)
    : config_(std::move(config)),
      clock_(clock),
      counters_(std::make_unique<Counters>()),
      shards_(config_.topology, config_.timeouts, config_.max_redirects),
      codec_(config_.compression, config_.compression_level, shuffle_for(config_)) {
  char fp[17];
  std::snprintf(fp, sizeof(fp), "%016llx", static_cast<unsigned long long>(config_.model_fingerprint));
  key_prefix_ = std::string("pagoda@") + fp + "@" + std::string(kernels::kv_dtype_name(config_.layout.dtype)) + "-" +
                std::string(kernels::kv_layout_name(config_.layout.layout)) + "-b" +
                std::to_string(config_.layout.block_size) + "@";
  record_bytes_ = kvcache::record_bytes(kvcache::record_meta_for(config_.layout));
  health_.resize(static_cast<size_t>(shards_.num_shards()));
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  CHECK_GE(event_fd_, 0) << "eventfd: " << std::strerror(errno);
}

Result<std::unique_ptr<RedisTier>> RedisTier::create(RedisTierConfig config, const Clock* clock) {
  CHECK(clock != nullptr);
  PAGODA_RETURN_IF_ERROR(validate(config));
  std::unique_ptr<RedisTier> tier(new RedisTier(std::move(config), clock));
  tier->io_thread_ = std::thread([t = tier.get()] { t->io_main(); });
  // One probe per shard now, waited for (start-up, not the step loop): a Redis that is not
  // there starts down instead of failing the first requests one timeout at a time.
  for (size_t s = 0; s < tier->health_.size(); ++s) {
    tier->health_[s].state = Health::kProbing;
    Job job;
    job.kind = JobKind::kProbe;
    job.probe_shard = static_cast<int>(s);
    (void)tier->submit(std::move(job));
  }
  tier->publish_health();
  const int64_t bound_ms = static_cast<int64_t>(tier->health_.size()) *
                               (tier->config_.timeouts.connect_ms + 2 * tier->config_.timeouts.io_ms) * 2 + 1000;
  const int64_t give_up = SteadyClock().now_ns() + bound_ms * 1'000'000;
  std::vector<kvcache::TierCompletion> none;
  const auto probing = [&] {
    for (const ShardHealth& h : tier->health_) {
      if (h.state == Health::kProbing) return true;
    }
    return false;
  };
  while (probing() && SteadyClock().now_ns() < give_up) {
    pollfd pfd{tier->event_fd_, POLLIN, 0};
    (void)::poll(&pfd, 1, 100);
    tier->poll(none);
  }
  CHECK(none.empty()) << "completions before any op";
  return tier;
}

RedisTier::~RedisTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (io_thread_.joinable()) io_thread_.join();
  if (event_fd_ >= 0) ::close(event_fd_);
}

std::string RedisTier::key_of(kvcache::BlockHash hash) const {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return key_prefix_ + hex;
}

bool RedisTier::enabled() const { return counters_->shards_up.load() > 0; }

void RedisTier::publish_health() {
  int up = 0;
  for (const ShardHealth& h : health_) up += h.state == Health::kUp ? 1 : 0;
  counters_->shards_up = up;
}

std::string RedisTier::disabled_reason() const {
  std::string out;
  for (size_t s = 0; s < health_.size(); ++s) {
    if (health_[s].state == Health::kUp) continue;
    if (!out.empty()) out += "; ";
    out += health_[s].reason.empty() ? "redis " + shards_.shard_name(static_cast<int>(s)) + " is being probed" : health_[s].reason;
  }
  return out;
}

kvcache::TierOpId RedisTier::submit(Job job) {
  if (job.kind != JobKind::kProbe && job.kind != JobKind::kErase) job.id = next_op_++;
  job.submit_ns = clock_->now_ns();
  const kvcache::TierOpId id = job.id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
  return id;
}

kvcache::TierOpId RedisTier::finish_now(kvcache::TierOpKind kind, int64_t num_items, Status status) {
  kvcache::TierCompletion c;
  c.op = next_op_++;
  c.kind = kind;
  c.num_items = num_items;
  c.status = std::move(status);
  c.submit_ns = c.complete_ns = clock_->now_ns();
  ready_.push_back(std::move(c));
  signal_fd(event_fd_);  // a caller waiting on completion_fd() must see it too
  return ready_.back().op;
}

int64_t RedisTier::up_prefix(std::span<const kvcache::BlockHash> hashes) const {
  int64_t n = 0;
  while (n < static_cast<int64_t>(hashes.size()) && health_[shards_.shard_of(hashes[n])].state == Health::kUp) ++n;
  return n;
}

kvcache::TierOpId RedisTier::lookup(std::span<const kvcache::BlockHash> chain) {
  schedule_probes();
  counters_->lookups += 1;
  const int64_t n = up_prefix(chain);
  counters_->items_while_down += static_cast<int64_t>(chain.size()) - n;
  if (n == 0) {
    return finish_now(kvcache::TierOpKind::kLookup, static_cast<int64_t>(chain.size()),
                      chain.empty() ? Status::ok() : Status::unavailable(disabled_reason()));
  }
  Job job;
  job.kind = JobKind::kLookup;
  job.num_items = static_cast<int64_t>(chain.size());
  job.hashes.assign(chain.begin(), chain.begin() + n);
  return submit(std::move(job));
}

kvcache::TierOpId RedisTier::put(std::span<const kvcache::TierPut> blocks) {
  schedule_probes();
  counters_->puts += 1;
  const kvcache::BlockRecordMeta want = kvcache::record_meta_for(config_.layout);
  const int64_t item_bytes = want.block_size * 4 + want.payload_bytes;
  Job job;
  job.kind = JobKind::kPut;
  job.num_items = static_cast<int64_t>(blocks.size());
  int64_t accepted = 0;
  for (const kvcache::TierPut& b : blocks) {
    const kvcache::BlockRecordMeta& m = b.meta;
    CHECK(m.block_size == want.block_size && m.n_layer == want.n_layer && m.n_kv_head == want.n_kv_head &&
          m.head_dim == want.head_dim && m.kv_dtype == want.kv_dtype && m.kv_layout == want.kv_layout &&
          m.payload_bytes == want.payload_bytes)
        << "redis tier: put of a block of another layout";
    CHECK_EQ(static_cast<int64_t>(b.tokens.size()), static_cast<int64_t>(want.block_size));
    const int shard = shards_.shard_of(m.block_hash);
    const bool up = health_[shard].state == Health::kUp;
    const bool ours = m.ns.model_fingerprint == config_.model_fingerprint && m.ns.kv_format == config_.kv_format;
    accepted += up && ours ? 1 : 0;
    job.puts.push_back(PutItem{m, shard, !(up && ours), {}});
  }
  if (accepted < job.num_items) counters_->items_while_down += job.num_items - accepted;
  if (accepted == 0) {
    counters_->put_failures += job.num_items;
    return finish_now(kvcache::TierOpKind::kPut, job.num_items,
                      job.num_items == 0 ? Status::ok() : Status::unavailable(disabled_reason()));
  }
  job.put_bytes = accepted * item_bytes;
  if (inflight_put_bytes_.load() + job.put_bytes > config_.max_inflight_put_bytes) {
    counters_->put_rejected_backpressure += job.num_items;
    counters_->put_failures += job.num_items;
    return finish_now(kvcache::TierOpKind::kPut, job.num_items,
                      Status::unavailable("redis tier: " + std::to_string(inflight_put_bytes_.load() >> 20) +
                                          " MiB of puts still in flight (Redis slower than the pool evicts)"));
  }
  inflight_put_bytes_ += job.put_bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);  // reuse buffers the I/O thread handed back
    for (size_t i = 0; i < job.puts.size(); ++i) {
      if (job.puts[i].skipped || free_put_buffers_.empty()) continue;
      job.puts[i].bytes = std::move(free_put_buffers_.back());
      free_put_buffers_.pop_back();
    }
  }
  for (size_t i = 0; i < job.puts.size(); ++i) {
    PutItem& item = job.puts[i];
    if (item.skipped) continue;
    item.bytes.resize(static_cast<size_t>(item_bytes));
    const kvcache::TierPut& b = blocks[i];
    std::memcpy(item.bytes.data(), b.tokens.data(), b.tokens.size_bytes());
    size_t at = b.tokens.size_bytes();
    for (kvcache::ConstByteSpan seg : b.payload) {
      CHECK_LE(at + seg.size(), item.bytes.size()) << "put payload larger than the block";
      std::memcpy(item.bytes.data() + at, seg.data(), seg.size());
      at += seg.size();
    }
    CHECK_EQ(at, item.bytes.size()) << "put payload smaller than the block";
  }
  return submit(std::move(job));
}

kvcache::TierOpId RedisTier::get(std::span<const kvcache::TierGet> blocks) {
  schedule_probes();
  counters_->gets += 1;
  std::vector<kvcache::BlockHash> hashes;
  hashes.reserve(blocks.size());
  for (const kvcache::TierGet& g : blocks) {
    CHECK_EQ(static_cast<int64_t>(g.tokens_out.size()), config_.layout.block_size);
    CHECK_EQ(static_cast<int64_t>(g.dest.size()), 2 * config_.layout.n_layer);
    hashes.push_back(g.hash);
  }
  const int64_t n = up_prefix(hashes);
  counters_->items_while_down += static_cast<int64_t>(blocks.size()) - n;
  counters_->get_failures += static_cast<int64_t>(blocks.size()) - n;
  if (n == 0) {
    return finish_now(kvcache::TierOpKind::kGet, static_cast<int64_t>(blocks.size()),
                      blocks.empty() ? Status::ok() : Status::unavailable(disabled_reason()));
  }
  Job job;
  job.kind = JobKind::kGet;
  job.num_items = static_cast<int64_t>(blocks.size());
  job.gets.assign(blocks.begin(), blocks.begin() + n);
  return submit(std::move(job));
}

void RedisTier::erase(std::span<const kvcache::BlockHash> hashes) {
  Job job;
  job.kind = JobKind::kErase;
  for (kvcache::BlockHash h : hashes) {
    if (health_[shards_.shard_of(h)].state == Health::kUp) job.hashes.push_back(h);
  }
  if (!job.hashes.empty()) (void)submit(std::move(job));
}

void RedisTier::apply(Done& done) {
  const int64_t now = clock_->now_ns();
  const auto down = [&](ShardHealth& h, std::string reason) {
    h.state = Health::kDown;
    h.reason = std::move(reason);
    h.backoff_ns = h.backoff_ns == 0 ? config_.probe_backoff_initial_ms * 1'000'000
                                     : std::min(2 * h.backoff_ns, config_.probe_backoff_max_ms * 1'000'000);
    h.next_probe_ns = now + h.backoff_ns;
  };
  for (auto& [shard, why] : done.faults) {
    if (health_[shard].state == Health::kUp) down(health_[shard], why);
  }
  if (!done.is_op && done.probe_shard >= 0) {
    ShardHealth& h = health_[done.probe_shard];
    counters_->probes += 1;
    if (done.probe_status.is_ok()) {
      if (h.backoff_ns != 0) counters_->recoveries += 1;
      h = ShardHealth{};
      const int64_t ns = now - done.probe_submit_ns;
      if (!probe_sampled_ && done.probe_bytes > 0 && ns > 0) {
        probe_sample_ = {done.probe_bytes, ns};
        probe_sampled_ = true;
      }
    } else {
      counters_->probe_failures += 1;
      down(h, done.probe_status.message());
    }
  }
  publish_health();
}

void RedisTier::schedule_probes() {
  const int64_t now = clock_->now_ns();
  for (size_t s = 0; s < health_.size(); ++s) {
    ShardHealth& h = health_[s];
    if (h.state != Health::kDown || now < h.next_probe_ns) continue;
    h.state = Health::kProbing;
    Job job;
    job.kind = JobKind::kProbe;
    job.probe_shard = static_cast<int>(s);
    (void)submit(std::move(job));
  }
}

void RedisTier::poll(std::vector<kvcache::TierCompletion>& out) {
  uint64_t drained = 0;  // before taking done_: a Done pushed later signals again
  [[maybe_unused]] ssize_t n = ::read(event_fd_, &drained, sizeof(drained));
  {
    std::lock_guard<std::mutex> lock(mu_);
    polled_.swap(done_);
  }
  const int64_t now = clock_->now_ns();
  for (Done& d : polled_) {
    apply(d);
    if (!d.is_op) continue;
    d.completion.complete_ns = now;
    out.push_back(std::move(d.completion));
  }
  polled_.clear();
  for (kvcache::TierCompletion& c : ready_) out.push_back(std::move(c));
  ready_.clear();
  schedule_probes();
}

kvcache::TierStats RedisTier::stats() const {
  const Counters& c = *counters_;
  kvcache::TierStats s;
  s.lookups = c.lookups;
  s.lookup_hit_blocks = c.lookup_hit_blocks;
  s.puts = c.puts;
  s.put_blocks = c.put_blocks;
  s.put_failures = c.put_failures;
  s.gets = c.gets;
  s.get_blocks = c.get_blocks;
  s.get_failures = c.get_failures;
  s.bytes_written = c.bytes_written;
  s.bytes_read = c.bytes_read;
  s.corrupt_records = c.corrupt_records;
  s.faults = c.faults;
  return s;
}

RedisTierStats RedisTier::redis_stats() const {
  const Counters& c = *counters_;
  RedisTierStats s;
  s.shards.connects = c.connects;
  s.shards.faults = c.faults;
  s.shards.timeouts = c.timeouts;
  s.shards.moved_redirects = c.moved;
  s.shards.ask_redirects = c.ask;
  s.shards.slot_map_refreshes = c.refreshes;
  s.missing_records = c.missing_records;
  s.put_skipped_existing = c.put_skipped_existing;
  s.put_rejected_full = c.put_rejected_full;
  s.put_rejected_backpressure = c.put_rejected_backpressure;
  s.items_while_down = c.items_while_down;
  s.probes = c.probes;
  s.probe_failures = c.probe_failures;
  s.recoveries = c.recoveries;
  s.raw_bytes_written = c.raw_bytes_written;
  s.raw_bytes_read = c.raw_bytes_read;
  s.compress_ns = c.compress_ns;
  s.decompress_ns = c.decompress_ns;
  s.io_ns = c.io_ns;
  s.shards_down = shards_.num_shards() - c.shards_up.load();
  return s;
}

}  // namespace pagoda::store
