#include "events/kv_event_publisher.h"

#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>

#include "core/check.h"
#include "events/event_codec.h"

namespace pagoda::events {

void KvEventPublisher::Queue::clear() {
  events.clear();
  hashes.clear();
  tokens.clear();
  num_events = 0;
}

KvEventPublisher::KvEventPublisher(const KvEventsConfig& config, std::function<double()> unix_time, const Logger& logger)
    : config_(config), unix_time_(std::move(unix_time)), logger_(logger) {
  media_.push_back(kDeviceMedium);
}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::create(const KvEventsConfig& config,
                                                                   std::function<double()> unix_time,
                                                                   const Logger& logger) {
  CHECK(config.publishes()) << "a KV event publisher needs enable_kv_cache_events and publisher \"zmq\"";
  CHECK(unix_time != nullptr);
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(config, std::move(unix_time), logger));
  PAGODA_RETURN_IF_ERROR(p->open_sockets());
  {
    std::lock_guard lock(p->mutex_);
    p->push_cleared_locked();  // the first batch: this instance starts empty
    p->wake_locked(/*was_empty=*/true);
  }
  p->thread_ = std::thread([raw = p.get()] { raw->run(); });
  return p;
}

Status KvEventPublisher::open_sockets() {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Status::error("eventfd failed");
  pub_ = ZmqSocket(context_, ZMQ_PUB);
  PAGODA_RETURN_IF_ERROR(pub_.set_int(ZMQ_SNDHWM, static_cast<int>(config_.hwm)));
  const std::string endpoint = offset_endpoint(config_.endpoint, config_.data_parallel_rank);
  if (endpoint_binds(endpoint)) {
    PAGODA_RETURN_IF_ERROR(pub_.bind(endpoint).with_context("KV events endpoint"));
    endpoint_ = pub_.last_endpoint();
  } else {
    PAGODA_RETURN_IF_ERROR(pub_.connect(endpoint).with_context("KV events endpoint"));
    endpoint_ = endpoint;
  }
  if (!config_.replay_endpoint.empty()) {
    replay_ = ZmqSocket(context_, ZMQ_ROUTER);
    // A replay streams up to buffer_steps messages to one client: room for all of them.
    PAGODA_RETURN_IF_ERROR(replay_.set_int(ZMQ_SNDHWM, static_cast<int>(std::min<int64_t>(config_.buffer_steps + 16, INT32_MAX))));
    const std::string replay = offset_endpoint(config_.replay_endpoint, config_.data_parallel_rank);
    PAGODA_RETURN_IF_ERROR(replay_.bind(replay).with_context("KV events replay endpoint"));
    replay_endpoint_ = replay_.last_endpoint();
  }
  return Status::ok();
}

KvEventPublisher::~KvEventPublisher() {
  stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

// ---- step thread -------------------------------------------------------------------------

uint8_t KvEventPublisher::medium_id_locked(std::string_view medium) {
  for (size_t i = 0; i < media_.size(); ++i) {
    if (media_[i] == medium) return static_cast<uint8_t>(i);
  }
  CHECK(media_.size() < 255) << "too many KV event media";
  media_.emplace_back(medium);
  return static_cast<uint8_t>(media_.size() - 1);
}

bool KvEventPublisher::admit_locked() {
  if (queue_.num_events < config_.max_queue_size) {
    loss_marked_ = false;
    return true;
  }
  ++stats_.events_dropped;
  if (!loss_marked_) {
    Pending loss;
    loss.kind = Kind::kLoss;
    queue_.events.push_back(loss);
    loss_marked_ = true;
  }
  return false;
}

void KvEventPublisher::wake_locked(bool was_empty) {
  stats_.max_queue_depth = std::max(stats_.max_queue_depth, queue_.num_events);
  if (!was_empty) return;  // the publisher thread is awake already, or will take these with the rest
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void KvEventPublisher::push_stored_locked(uint8_t medium, std::span<const kvcache::BlockInfo> run) {
  for (const kvcache::BlockInfo& b : run) mirror_.insert(media_[medium], std::span<const uint64_t>(&b.hash, 1));
  if (!admit_locked()) return;
  Pending p;
  p.type = KvEventType::kBlockStored;
  p.medium = medium;
  p.has_parent = run[0].parent_hash != kvcache::kRootBlockHash;
  p.parent = run[0].parent_hash;
  p.salt_key = run[0].ns.cache_salt;
  p.block_size = static_cast<int32_t>(run[0].tokens.size());
  p.hash_begin = static_cast<uint32_t>(queue_.hashes.size());
  p.token_begin = static_cast<uint32_t>(queue_.tokens.size());
  for (const kvcache::BlockInfo& b : run) {
    queue_.hashes.push_back(b.hash);
    queue_.tokens.insert(queue_.tokens.end(), b.tokens.begin(), b.tokens.end());
  }
  p.num_hashes = static_cast<uint32_t>(run.size());
  p.num_tokens = static_cast<uint32_t>(queue_.tokens.size() - p.token_begin);
  queue_.events.push_back(p);
  ++queue_.num_events;
}

void KvEventPublisher::push_removed_locked(uint8_t medium, uint64_t hash) {
  mirror_.erase(media_[medium], std::span<const uint64_t>(&hash, 1));
  // Evictions of one step coalesce into one BlockRemoved (the last event's hashes end the array).
  if (!queue_.events.empty()) {
    Pending& last = queue_.events.back();
    if (last.kind == Kind::kEvent && last.type == KvEventType::kBlockRemoved && last.medium == medium &&
        last.num_hashes < kMaxBatchEvents) {
      queue_.hashes.push_back(hash);
      ++last.num_hashes;
      return;
    }
  }
  if (!admit_locked()) return;
  Pending p;
  p.type = KvEventType::kBlockRemoved;
  p.medium = medium;
  p.hash_begin = static_cast<uint32_t>(queue_.hashes.size());
  p.num_hashes = 1;
  queue_.hashes.push_back(hash);
  queue_.events.push_back(p);
  ++queue_.num_events;
}

void KvEventPublisher::push_cleared_locked() {
  mirror_.clear();
  if (!admit_locked()) return;
  Pending p;
  p.type = KvEventType::kAllBlocksCleared;
  queue_.events.push_back(p);
  ++queue_.num_events;
}

// Consecutive blocks whose parent is the block before form one chain (one BlockStored).
template <class Push>
void for_each_chain(std::span<const kvcache::BlockInfo> blocks, Push&& push) {
  size_t begin = 0;
  for (size_t i = 1; i <= blocks.size(); ++i) {
    if (i == blocks.size() || blocks[i].parent_hash != blocks[i - 1].hash) {
      push(blocks.subspan(begin, i - begin));
      begin = i;
    }
  }
}

void KvEventPublisher::on_blocks_stored(std::span<const kvcache::BlockInfo> chain) {
  if (chain.empty()) return;
  std::lock_guard lock(mutex_);
  const bool was_empty = queue_.events.empty();
  for_each_chain(chain, [&](std::span<const kvcache::BlockInfo> run) { push_stored_locked(0, run); });
  wake_locked(was_empty);
}

void KvEventPublisher::on_block_evicted(const kvcache::BlockInfo& block) {
  std::lock_guard lock(mutex_);
  const bool was_empty = queue_.events.empty();
  push_removed_locked(0, block.hash);
  wake_locked(was_empty);
}

void KvEventPublisher::on_tier_stored(std::string_view medium, std::span<const kvcache::BlockInfo> blocks) {
  if (blocks.empty()) return;
  std::lock_guard lock(mutex_);
  const bool was_empty = queue_.events.empty();
  const uint8_t id = medium_id_locked(medium);
  for_each_chain(blocks, [&](std::span<const kvcache::BlockInfo> run) { push_stored_locked(id, run); });
  wake_locked(was_empty);
}

void KvEventPublisher::on_tier_removed(std::string_view medium, std::span<const kvcache::BlockHash> hashes) {
  if (hashes.empty()) return;
  std::lock_guard lock(mutex_);
  const bool was_empty = queue_.events.empty();
  const uint8_t id = medium_id_locked(medium);
  for (kvcache::BlockHash h : hashes) push_removed_locked(id, h);
  wake_locked(was_empty);
}

// ---- any thread --------------------------------------------------------------------------

Result<KvEventsSnapshot> KvEventPublisher::snapshot(double timeout_s) {
  std::unique_lock lock(mutex_);
  if (stopping_ || stopped_) return Status::unavailable("the KV event publisher has stopped");
  KvEventsSnapshot s = mirror_.snapshot(-1);
  const uint64_t id = next_barrier_++;
  const bool was_empty = queue_.events.empty();
  Pending barrier;
  barrier.kind = Kind::kBarrier;
  barrier.barrier_id = id;
  queue_.events.push_back(barrier);
  wake_locked(was_empty);
  const bool reached = barrier_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                            [&] { return barrier_seqs_.count(id) != 0 || stopped_; });
  auto it = barrier_seqs_.find(id);
  if (!reached || it == barrier_seqs_.end()) return Status::unavailable("the KV event publisher did not answer in time");
  s.seq = it->second;
  barrier_seqs_.erase(it);
  return s;
}

PublisherStats KvEventPublisher::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void KvEventPublisher::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      // already stopping or stopped; join below if this call owns the thread
    } else {
      stopping_ = true;
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
    }
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mutex_);
  stopped_ = true;
  barrier_cv_.notify_all();
}

}  // namespace pagoda::events
