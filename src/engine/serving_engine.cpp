// ServingEngine: creation, validation, the thread-safe inbox, the loop thread, shutdown and
// metrics. The step itself is in serving_step.cpp; the contract in engine/serving.h.
#include "engine/serving_engine.h"

#include <algorithm>

namespace pagoda::engine {

void Histogram::observe(double value) {
  size_t b = 0;
  while (b < kBounds.size() && value > kBounds[b]) ++b;  // Prometheus "le" buckets
  ++buckets[b];
  sum += value;
  ++count;
}

void ServingEngine::with_block_manager(const std::function<void(kvcache::BlockManager&)>&) {
  CHECK(false) << "this ServingEngine has no block manager to lend";
}

void ServingEngine::with_parked(RequestId, const std::function<void(kvcache::BlockManager&, kvcache::SeqId)>&) {
  CHECK(false) << "this ServingEngine has no block manager to lend";
}

namespace {

SchedulerOptions scheduler_options(Engine& engine, const ServingConfig& c, const StepCostModel* step_cost) {
  SchedulerOptions o;
  o.step_budget_ns = static_cast<int64_t>(c.step_budget_ms * 1e6);
  o.step_cost = step_cost;
  o.max_num_batched_tokens = c.max_num_batched_tokens;
  o.max_num_seqs = c.max_num_seqs;
  const int64_t num_blocks = engine.kv_plan().num_blocks;
  o.watermark_blocks = static_cast<int64_t>(c.kv_watermark * static_cast<double>(num_blocks) + 0.999999);
  o.enable_prefix_caching = engine.config().enable_prefix_caching;
  o.tiers = engine.tiers();
  o.load_cost = engine.load_cost();
  o.preemption = c.preemption;
  if (engine.windowed()) {
    o.windows.on = true;
    o.windows.stream_sinks = engine.stream_sinks();
    o.windows.stream_window = engine.stream_window();
    o.windows.kv_token_cap = engine.kv_token_cap();
    o.windows.max_chunk = engine.max_prefill_chunk();
  }
  return o;
}

}  // namespace

Result<std::unique_ptr<ServingEngine>> ServingEngine::create(std::unique_ptr<Engine> engine,
                                                             std::shared_ptr<const model::Tokenizer> tokenizer,
                                                             const ServingConfig& config) {
  if (engine == nullptr || tokenizer == nullptr) return Status::invalid_argument("serving needs an engine and a tokenizer");
  if (engine->windowed() && engine->kv_token_cap() > engine->kv_plan().token_capacity) {
    return Status::invalid_argument("one windowed sequence holds up to " + std::to_string(engine->kv_token_cap()) +
                                    " KV tokens, more than the KV cache (" +
                                    std::to_string(engine->kv_plan().token_capacity) + "); raise --kv-cache-mem");
  }
  if (tokenizer->vocab_size() > engine->model().config().n_vocab) {
    return Status::invalid_argument("the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                                    " tokens, more than the model's " + std::to_string(engine->model().config().n_vocab));
  }
  if (config.max_num_seqs < 0) return Status::invalid_argument("max_num_seqs must be >= 1 (0: the limit)");
  if (config.max_num_batched_tokens < 0) {
    return Status::invalid_argument("max_num_batched_tokens must be >= 1 (0: the limit)");
  }
  // The forward pass's scratch holds max_batch_tokens rows; every running sequence needs a row.
  const int64_t rows = engine->max_batch_tokens();
  if (config.max_num_batched_tokens > rows) {
    return Status::invalid_argument("max_num_batched_tokens " + std::to_string(config.max_num_batched_tokens) +
                                    " is more than the rows of one forward pass (" + std::to_string(rows) +
                                    ", the engine's max_batch_tokens)");
  }
  const int64_t tokens = config.max_num_batched_tokens > 0 ? config.max_num_batched_tokens : rows;
  if (config.max_num_seqs > tokens) {
    return Status::invalid_argument("max_num_seqs " + std::to_string(config.max_num_seqs) +
                                    " is more than the tokens per step (" + std::to_string(tokens) +
                                    "): every running sequence needs a row");
  }
  if (!(config.step_budget_ms >= 0 && config.step_budget_ms <= 3.6e6)) {
    return Status::invalid_argument("step_budget_ms must be in [0, 3600000]");
  }
  if (config.max_waiting < 0) return Status::invalid_argument("max_waiting must be >= 0");
  if (!(config.kv_watermark >= 0.0 && config.kv_watermark < 1.0)) {
    return Status::invalid_argument("kv_watermark must be in [0, 1)");
  }
  if (!(config.max_pinned_share >= 0.0 && config.max_pinned_share < 1.0)) {
    return Status::invalid_argument("max_pinned_share must be in [0, 1): pins must leave some of the pool to compute in");
  }
  ServingConfig c = config;
  if (c.preemption == PreemptionMode::kSwap) {
    const kvcache::TierStack* tiers = engine->tiers();
    std::string why;
    if (tiers == nullptr || tiers->empty() || tiers->tier(0).medium() != "CPU") {
      why = "there is no host tier (--kv-host-mem)";
    } else if (!engine->config().enable_prefix_caching || engine->windowed()) {
      why = "swapped blocks come back through the prefix cache, which is off for this engine";
    }
    if (!why.empty()) engine->logger().warn("--preemption swap: " + why + "; preempted requests are recomputed");
  }
  c.max_num_batched_tokens = tokens;
  c.max_num_seqs = config.max_num_seqs > 0 ? config.max_num_seqs : std::min<int64_t>(64, tokens);
  return std::unique_ptr<ServingEngine>(new ServingEngineImpl(std::move(engine), std::move(tokenizer), c));
}

ServingEngineImpl::ServingEngineImpl(std::unique_ptr<Engine> engine, std::shared_ptr<const model::Tokenizer> tokenizer,
                                     const ServingConfig& config)
    : engine_(std::move(engine)),
      tokenizer_(std::move(tokenizer)),
      config_(config),
      clock_(&engine_->clock()),
      n_vocab_(engine_->model().config().n_vocab),
      pool_tokens_(engine_->kv_plan().num_blocks * engine_->kv_layout().block_size),
      step_cost_(kStepCostPriorFixedNs, kStepCostPriorPerTokenNs),
      scheduler_(engine_->block_manager(), scheduler_options(*engine_, config, &step_cost_)),
      history_(*clock_),
      pins_(engine_->block_manager(),
            static_cast<int64_t>(config.max_pinned_share * static_cast<double>(engine_->kv_plan().num_blocks))),
      start_ns_(clock_->now_ns()) {
  engine_->block_manager().add_listener(&history_);
  engine_->reserve_kv_select(engine_->config().kv_select, config_.max_num_seqs);  // (off: nothing)
  step_seqs_.reserve(config_.max_num_seqs);
  logits_.resize(config_.max_num_seqs * n_vocab_);
  row_.resize(n_vocab_);
  index_scratch_.resize(n_vocab_);
  touched_.reserve(config_.max_num_seqs);
  loop_metrics_.kv_blocks_total = engine_->kv_plan().num_blocks;
  if (const kvcache::TierStack* tiers = engine_->tiers()) {
    loop_metrics_.tiers.resize(static_cast<size_t>(tiers->num_tiers()));
    for (int t = 0; t < tiers->num_tiers(); ++t) loop_metrics_.tiers[static_cast<size_t>(t)].name = std::string(tiers->tier(t).name());
  }
  publish_metrics();
}

ServingEngineImpl::~ServingEngineImpl() {
  shutdown(false);
  engine_->block_manager().remove_listener(&history_);
}

Status ServingEngineImpl::validate(const CompletionRequest& r, int64_t* max_tokens, kvcache::KvSelectParams* select_out) const {
  const int64_t n_prompt = static_cast<int64_t>(r.prompt.size());
  if (n_prompt == 0) return Status::invalid_argument("empty prompt: at least one token (e.g. BOS) is needed");
  for (int32_t id : r.prompt) {
    if (id < 0 || id >= n_vocab_) return Status::invalid_argument("prompt token id " + std::to_string(id) + " outside the vocabulary");
  }
  for (int32_t id : r.stop_token_ids) {
    if (id < 0 || id >= n_vocab_) return Status::invalid_argument("stop token id " + std::to_string(id) + " outside the vocabulary");
  }
  for (const std::string& s : r.stop) {
    if (s.empty()) return Status::invalid_argument("empty stop string");
  }
  if (r.max_tokens < 1) return Status::invalid_argument("max_tokens must be >= 1");
  if (r.n < 1 || r.n > config_.max_num_seqs) {
    return Status::invalid_argument("n must be in [1, " + std::to_string(config_.max_num_seqs) + "] (max_num_seqs)");
  }
  if (r.logprobs < -1 || r.logprobs > 20) return Status::invalid_argument("logprobs must be in [0, 20] (or -1: none)");
  Status s = r.sampling.validate();
  if (!s.is_ok()) return Status::invalid_argument(s.message());
  if (n_prompt >= engine_->max_context()) {
    return Status::too_large("the prompt has " + std::to_string(n_prompt) + " tokens; the context of " +
                             std::to_string(engine_->max_context()) + " leaves no room to generate");
  }
  kvcache::KvSelectParams select = r.kv_select.has_value() ? *r.kv_select : engine_->config().kv_select;
  if (select.on()) {
    Status checked = engine_->check_kv_select(select);  // (normalizes)
    if (!checked.is_ok()) return Status::invalid_argument("kv_select: " + checked.message());
  }
  if (select_out != nullptr) *select_out = select;
  if (select.on()) {
    // The context bounds prompt + generated; the pool what the selection holds at once.
    *max_tokens = std::min(r.max_tokens, engine_->max_context() - n_prompt);
    const int64_t total = n_prompt + *max_tokens - 1;  // the last token needs no KV
    const int64_t held = select.method == kvcache::KvSelectMethod::kH2O ? std::min(total, select.budget)
                                                                         : std::max(n_prompt, std::min(total, select.budget));
    const int64_t pool_tokens = pool_tokens_ - pinned_blocks_.load() * engine_->kv_layout().block_size;
    if (held > pool_tokens) {
      return Status::too_large("kv_select " + select.describe() + " holds up to " + std::to_string(held) +
                               " KV tokens, more than the KV cache's " + std::to_string(pool_tokens) +
                               " (unpinned); raise --kv-cache-mem");
    }
    return Status::ok();
  }
  if (engine_->windowed()) {
    // Windowed sequences hold at most kv_token_cap tokens' blocks (checked against the pool at
    // create). StreamingLLM runs past the context (positions are cache positions); a
    // sliding-window model's positions still end at its context.
    *max_tokens = engine_->stream_window() > 0 ? r.max_tokens : std::min(r.max_tokens, engine_->max_context() - n_prompt);
    return Status::ok();
  }
  // Pinned blocks (engine/pinning.h) are not there to compute in.
  const int64_t pinned_tokens = pinned_blocks_.load() * engine_->kv_layout().block_size;
  const int64_t pool_tokens = pool_tokens_ - pinned_tokens;
  if (n_prompt > pool_tokens) {
    return Status::too_large("the prompt needs " + std::to_string(n_prompt) + " KV tokens, more than the whole KV cache (" +
                             std::to_string(pool_tokens) + " tokens" +
                             (pinned_tokens > 0 ? " beside the " + std::to_string(pinned_tokens) + " pinned ones" : "") +
                             "; raise --kv-cache-mem)");
  }
  // The context bounds prompt + generated; the pool bounds the KV, which the last token never
  // needs. Each choice then fits the pool on its own, so the scheduler always makes progress.
  *max_tokens = std::min({r.max_tokens, engine_->max_context() - n_prompt, pool_tokens - n_prompt + 1});
  return Status::ok();
}

Result<RequestId> ServingEngineImpl::submit(CompletionRequest request, std::shared_ptr<RequestObserver> observer) {
  return enqueue(std::move(request), std::move(observer), nullptr);
}

Result<RequestId> ServingEngineImpl::enqueue(CompletionRequest request, std::shared_ptr<RequestObserver> observer,
                                             std::shared_ptr<PinJob> pin) {
  if (observer == nullptr) return Status::invalid_argument("no observer");
  int64_t max_tokens = 0;
  kvcache::KvSelectParams select;
  PAGODA_RETURN_IF_ERROR(validate(request, &max_tokens, &select));
  request.kv_select = select;  // resolved: admit_new reads it as is
  const int64_t now = clock_->now_ns();
  RequestId id = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!accepting_) return Status::unavailable("the server is shutting down");
    if (num_waiting_ + static_cast<int64_t>(inbox_.size()) >= config_.max_waiting) {
      return Status::unavailable("too many queued requests (" + std::to_string(config_.max_waiting) + "); retry later");
    }
    id = next_id_++;
    inbox_.push_back({id, std::move(request), std::move(observer), max_tokens, now, std::move(pin)});
  }
  wake_.notify_one();
  return id;
}

void ServingEngineImpl::abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborts_.push_back(id);
  }
  wake_.notify_one();
}

void ServingEngineImpl::with_parked(RequestId id,
                                    const std::function<void(kvcache::BlockManager&, kvcache::SeqId)>& fn) {
  run_on_loop([&] {
    kvcache::SeqId kv = -1;
    if (auto it = parked_.find(id); it != parked_.end()) {
      kv = it->second;
      parked_.erase(it);
    }
    fn(engine_->block_manager(), kv);
  });
}

void ServingEngineImpl::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  CHECK(!started_) << "ServingEngine::start() called twice";
  if (stopping_) return;
  started_ = true;
  loop_running_ = true;
  loop_ = std::thread([this] { run_loop(); });
}

void ServingEngineImpl::run_loop() {
  for (;;) {
    run_integrity_checks();
    run_loop_tasks();
    const bool worked = step_locked_out();
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopping_ && requests_.empty() && inbox_.empty()) break;
    if (!worked) {
      wake_.wait(lock, [&] {
        return !inbox_.empty() || !aborts_.empty() || stopping_ || integrity_requests_ > integrity_done_ ||
               !loop_tasks_.empty();
      });
    }
  }
  run_loop_tasks();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    loop_running_ = false;
  }
  integrity_checked_.notify_all();
  loop_tasks_ran_.notify_all();
}

void ServingEngineImpl::shutdown(bool drain) {
  bool threaded = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepting_ = false;
    stopping_ = true;
    if (!drain) abort_all_ = true;
    threaded = started_;
  }
  wake_.notify_all();
  if (threaded) {
    if (loop_.joinable()) loop_.join();
    return;
  }
  while (step_locked_out()) {
  }
}

bool ServingEngineImpl::step() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    CHECK(!started_) << "ServingEngine::step() while the loop thread runs";
  }
  return step_locked_out();
}

ServingMetrics ServingEngineImpl::metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ServingMetrics m = published_;
  m.waiting += static_cast<int64_t>(inbox_.size());
  return m;
}

void ServingEngineImpl::check_integrity() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!started_ || !loop_.joinable() || std::this_thread::get_id() == loop_.get_id()) {
    lock.unlock();
    check_kv_integrity();
    return;
  }
  // Between two steps of the loop thread.
  const int64_t epoch = ++integrity_requests_;
  wake_.notify_all();
  integrity_checked_.wait(lock, [&] { return integrity_done_ >= epoch || !loop_running_; });
  if (integrity_done_ < epoch) {  // the loop ended meanwhile
    lock.unlock();
    check_kv_integrity();
  }
}

void ServingEngineImpl::check_kv_integrity() {
  engine_->block_manager().check_integrity();
  pins_.check_integrity();
  if (const kvcache::TierStack* tiers = engine_->tiers()) tiers->check_integrity();
}

void ServingEngineImpl::run_integrity_checks() {
  int64_t requested = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    requested = integrity_requests_;
    if (requested == integrity_done_) return;
  }
  check_kv_integrity();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    integrity_done_ = requested;
  }
  integrity_checked_.notify_all();
}

void ServingEngineImpl::publish_metrics() {
  kvcache::BlockManager& bm = engine_->block_manager();
  ServingMetrics& m = loop_metrics_;
  m.evicted_blocks = bm.stats().num_evictions;
  m.kv_blocks_in_use = bm.pool().num_in_use();
  m.kv_blocks_cached = bm.pool().num_cached();
  m.kv_blocks_free = bm.pool().num_free();
  if (const kvcache::TierStack* tiers = engine_->tiers()) {
    const int64_t bs = engine_->kv_layout().block_size;
    for (int t = 0; t < tiers->num_tiers(); ++t) {
      const kvcache::TierStats st = tiers->tier(t).stats();
      const kvcache::TierCounters& c = tiers->counters(t);
      TierMetrics& tm = m.tiers[static_cast<size_t>(t)];
      tm.enabled = tiers->tier(t).enabled();
      tm.capacity_blocks = st.capacity_blocks;
      tm.used_blocks = st.used_blocks;
      tm.hit_tokens = c.loaded_blocks * bs;
      tm.bytes_read = st.bytes_read;
      tm.bytes_written = st.bytes_written;
      tm.offloaded_blocks = c.offloaded_blocks;
      tm.demoted_blocks = c.demoted_blocks;
      tm.evicted_blocks = st.evictions;
      tm.failed_loads = c.failed_loads;
      tm.corrupt_records = st.corrupt_records;
      tm.faults = st.faults;
      tm.dropped_writes = c.dropped_writes;
      tm.retried_writes = c.retried_writes;
      tm.load_latency = c.load_latency;
    }
    const LoadDecisionStats& d = engine_->load_cost()->stats();
    m.tier_load_decisions = d.load;
    m.tier_recompute_decisions = d.recompute;
    m.tier_writes_pending = tiers->num_puts_in_flight() + tiers->num_retries_pending();
  }
  const std::span<const int64_t> routed = engine_->expert_tokens();
  m.expert_tokens.assign(routed.begin(), routed.end());  // sized once: no allocation after the first
  m.n_expert = engine_->model().config().n_expert;
  m.moe_first_layer = engine_->model().config().n_dense_lead;
  m.pins = pins_.num_pins();
  m.kv_blocks_pinned = pins_.num_pinned_blocks();
  m.pins_expired = pins_.num_expired();
  pinned_blocks_.store(m.kv_blocks_pinned);
  m.running = m.waiting = 0;
  for (const auto& [id, r] : requests_) {
    bool running = false;
    for (const Choice& c : r->choices) running = running || (c.seq >= 0 && scheduler_.get(c.seq).running());
    ++(running ? m.running : m.waiting);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  published_ = m;
  num_waiting_ = m.waiting;
}

}  // namespace pagoda::engine
