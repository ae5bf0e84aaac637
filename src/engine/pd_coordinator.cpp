// PdCoordinator (engine/pd_coordinator.h): leases on the prefill side, imports on the decode side.
#include "engine/pd_coordinator.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"

namespace pagoda::engine {

const char* pd_role_name(PdRole role) {
  switch (role) {
    case PdRole::kBoth: return "both";
    case PdRole::kPrefill: return "prefill";
    case PdRole::kDecode: return "decode";
  }
  return "both";
}

std::optional<PdRole> pd_role_from_name(std::string_view name) {
  if (name == "both") return PdRole::kBoth;
  if (name == "prefill") return PdRole::kPrefill;
  if (name == "decode") return PdRole::kDecode;
  return std::nullopt;
}

PdCoordinator::PdCoordinator(ServingEngine& serving, const PdConfig& config, const Clock& clock, const Logger& logger)
    : serving_(serving), config_(config), clock_(clock), logger_(logger) {}

Result<std::unique_ptr<PdCoordinator>> PdCoordinator::create(ServingEngine& serving, const PdConfig& config,
                                                             const Clock& clock, const Logger& logger) {
  if (!(config.lease_s > 0)) return Status::invalid_argument("the KV lease must be longer than 0 s");
  if (!(config.transfer_timeout_s > 0)) return Status::invalid_argument("the KV transfer timeout must be above 0 s");
  std::unique_ptr<PdCoordinator> pd(new PdCoordinator(serving, config, clock, logger));
  const Engine& eng = serving.engine();
  std::optional<transfer::PoolMemory> memory;
  int64_t num_blocks = 0;
  serving.with_block_manager([&](kvcache::BlockManager& bm) {
    memory = transfer::describe_pool(bm.pool(), config.engine_id, eng.model_fingerprint(), eng.kv_format_key());
    num_blocks = bm.pool().num_blocks();
  });
  pd->leases_ = std::make_unique<transfer::LeaseTable>(num_blocks, clock, static_cast<int64_t>(config.lease_s * 1e9));
  auto agent = transfer::UcxAgent::create(config.ucx, std::move(*memory), pd->leases_.get(), clock, logger);
  if (!agent.is_ok()) return agent.status().with_context("P/D KV transfer");
  pd->agent_ = std::move(agent).value();
  pd->slots_.resize(eng.kv_plan().token_capacity);
  pd->reaper_ = std::thread([p = pd.get()] { p->reap_loop(); });
  return pd;
}

PdCoordinator::~PdCoordinator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  agent_.reset();  // no peer reads our blocks from here on
  on_loop([&](kvcache::BlockManager& bm) {
    for (auto it = pins_.begin(); it != pins_.end();) it = end_lent(bm, it);
  });
}

PdCoordinator::LentMap::iterator PdCoordinator::end_lent(kvcache::BlockManager& bm, LentMap::iterator it) {
  if (it->second.seq >= 0) bm.free_sequence(it->second.seq);  // full blocks stay cached, the tail is freed
  return pins_.erase(it);  // a match unpins: cached, evictable again
}

void PdCoordinator::on_loop(const std::function<void(kvcache::BlockManager&)>& fn) {
  std::lock_guard<std::mutex> lock(loop_mutex_);
  serving_.with_block_manager(fn);
}

kvcache::KvNamespace PdCoordinator::ns_for(const std::string& cache_salt) const {
  const Engine& eng = serving_.engine();
  return kvcache::KvNamespace{eng.model_fingerprint(), eng.kv_format_key(), kvcache::cache_salt_key(cache_salt)};
}

transfer::KvTransferParams PdCoordinator::lend(std::span<const int32_t> prompt, const std::string& cache_salt,
                                               RequestId request) {
  const kvcache::KvNamespace ns = ns_for(cache_salt);
  const int64_t block_size = serving_.engine().kv_layout().block_size;
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  transfer::Lease lease;
  int64_t n_tokens = 0;
  {
    std::lock_guard<std::mutex> lock(loop_mutex_);
    serving_.with_parked(request, [&](kvcache::BlockManager& bm, kvcache::SeqId kv) {
      if (kv >= 0 && bm.num_computed(kv) >= n_prompt) {  // the whole prompt, its partial tail too
        const int64_t n_blocks = (n_prompt + block_size - 1) / block_size;
        lease = leases_->grant(std::span(bm.block_table(kv)).first(static_cast<size_t>(n_blocks)));
        pins_.emplace(lease.id, Lent{kvcache::PrefixMatch(), kv});
        n_tokens = n_prompt;
        return;
      }
      if (kv >= 0) bm.free_sequence(kv);
      kvcache::PrefixMatch match = bm.match_prefix(prompt, ns);  // its full blocks, if still cached
      if (match.empty()) return;
      lease = leases_->grant(match.blocks());
      n_tokens = match.num_tokens();
      pins_.emplace(lease.id, Lent{std::move(match), -1});
    });
  }
  transfer::KvTransferParams p;
  p.do_remote_prefill = true;
  p.remote_engine_id = config_.engine_id;
  p.remote_host = agent_->host();
  p.remote_port = agent_->port();
  p.remote_request_id = std::to_string(request);
  p.remote_lease_id = lease.id;
  p.remote_block_size = block_size;
  for (const transfer::BlockRef& r : lease.blocks) {
    p.remote_block_ids.push_back(r.block);
    p.remote_block_generations.push_back(r.generation);
  }
  p.remote_num_tokens = n_tokens;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.lent_blocks += static_cast<int64_t>(lease.blocks.size());
  }
  wake_.notify_all();  // a new deadline
  return p;
}

void PdCoordinator::drop_parked(RequestId request) {
  std::lock_guard<std::mutex> lock(loop_mutex_);
  serving_.with_parked(request, [](kvcache::BlockManager& bm, kvcache::SeqId kv) {
    if (kv >= 0) bm.free_sequence(kv);
  });
}

void PdCoordinator::release(kvcache::SeqId imported) {
  if (imported < 0) return;
  on_loop([&](kvcache::BlockManager& bm) { bm.free_sequence(imported); });
}

ImportOutcome PdCoordinator::fall_back(std::string reason) {
  logger_.warn("P/D: computing the prompt here: " + reason);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.imports_fallback;
  stats_.last_fallback = reason;
  ImportOutcome out;
  out.reason = std::move(reason);
  return out;
}

ImportOutcome PdCoordinator::import(std::span<const int32_t> prompt, const std::string& cache_salt,
                                    const transfer::KvTransferParams& params, int64_t table_tokens) {
  const int64_t block_size = serving_.engine().kv_layout().block_size;
  const int64_t n_remote = static_cast<int64_t>(params.remote_block_ids.size());
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (params.remote_lease_id == 0 || n_remote == 0) return fall_back("the prefill worker lent no blocks");
  if (params.remote_block_size != block_size) {
    return fall_back("the prefill worker's block size " + std::to_string(params.remote_block_size) + " is not ours (" +
                     std::to_string(block_size) + ")");
  }
  if (params.remote_num_tokens > n_prompt ||
      (params.remote_num_tokens + block_size - 1) / block_size != n_remote) {
    return fall_back("the prefill worker lent blocks for " + std::to_string(params.remote_num_tokens) +
                     " tokens of a " + std::to_string(n_prompt) + "-token prompt in " + std::to_string(n_remote) +
                     " blocks");
  }
  // The KV of every prompt token but the last (which this side computes for its logits).
  const int64_t n_tokens = std::min(params.remote_num_tokens, n_prompt - 1);
  const int64_t n_blocks = (n_tokens + block_size - 1) / block_size;  // <= n_remote
  const kvcache::KvNamespace ns = ns_for(cache_salt);
  kvcache::SeqId seq = -1;
  int64_t n_local = 0;
  std::string refused;
  transfer::PullRequest pull;
  on_loop([&](kvcache::BlockManager& bm) {
    kvcache::PrefixMatch local = bm.match_prefix(prompt, ns);
    n_local = std::min(local.num_blocks(), n_blocks);
    if (local.num_tokens() >= n_tokens) return;  // all here already: only the lease to end
    if (n_tokens > static_cast<int64_t>(slots_.size()) || !bm.plan(local, n_tokens).fits()) {
      refused = "no free KV blocks for the transfer";
      return;
    }
    seq = bm.add_sequence(std::max(table_tokens, n_tokens), {ns, 0, true});
    bm.adopt(seq, std::move(local));  // n_local full blocks: fewer than n_blocks
    const int64_t n_new = n_tokens - bm.length(seq);
    copies_.clear();
    CHECK(bm.append(seq, prompt.subspan(bm.length(seq), n_new), std::span(slots_).first(n_new), copies_));
    CHECK(copies_.empty());  // fresh blocks
    const std::vector<int32_t>& table = bm.block_table(seq);
    for (int64_t i = n_local; i < n_blocks; ++i) {
      pull.blocks.push_back({{params.remote_block_ids[i], params.remote_block_generations[i]}, table[i]});
    }
  });
  if (!refused.empty()) return fall_back(refused);
  pull.host = params.remote_host;
  pull.port = params.remote_port;
  pull.lease_id = params.remote_lease_id;
  pull.timeout_s = config_.transfer_timeout_s;
  // Zero blocks still confirm: the prefill side drops its lease now rather than at expiry.
  const transfer::PullResult r = agent_->pull(pull);
  if (seq >= 0) {
    // Registered only now (nobody saw unconfirmed bytes); the partial last block stays the
    // sequence's, which the request adopts.
    on_loop([&](kvcache::BlockManager& bm) {
      if (r.status.is_ok()) {
        bm.commit(seq);
      } else {
        bm.free_sequence(seq);
      }
    });
  }
  if (!r.status.is_ok()) return fall_back(r.status.message());
  ImportOutcome out;
  out.imported = true;
  out.sequence = seq;
  out.blocks_pulled = static_cast<int64_t>(pull.blocks.size());
  out.bytes = r.bytes;
  out.seconds = r.seconds;
  out.transports = r.rma_transports;
  out.cached_tokens = seq >= 0 ? n_tokens : n_local * block_size;
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.imports_ok;
  stats_.imported_blocks += out.blocks_pulled;
  stats_.imported_bytes += r.bytes;
  stats_.local_hit_blocks += n_local;
  stats_.transfer_seconds += r.seconds;
  stats_.last_transports = r.rma_transports;
  return out;
}

void PdCoordinator::reap() {
  const std::vector<uint64_t> ended = leases_->take_ended();
  if (ended.empty()) return;
  on_loop([&](kvcache::BlockManager& bm) {
    for (uint64_t id : ended) {
      if (auto it = pins_.find(id); it != pins_.end()) end_lent(bm, it);
    }
  });
}

void PdCoordinator::reap_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const int64_t deadline = leases_->next_deadline_ns();
    const int64_t wait_ns = std::clamp<int64_t>(deadline - clock_.now_ns(), 0, 20'000'000);
    wake_.wait_for(lock, std::chrono::nanoseconds(wait_ns));
    if (stopping_) break;
    lock.unlock();
    reap();
    lock.lock();
  }
}

PdStats PdCoordinator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  PdStats s = stats_;
  s.leases = leases_->stats();
  return s;
}

}  // namespace pagoda::engine
