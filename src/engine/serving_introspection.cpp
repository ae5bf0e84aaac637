// ServingEngine's KvIntrospector (engine/introspection.h): snapshots, request dumps and explain,
// each run on the loop thread between two steps so that it sees one consistent state.
#include <algorithm>
#include <unordered_set>

#include "engine/kv_inspect.h"
#include "engine/serving_engine.h"

namespace pagoda::engine {

void ServingEngineImpl::run_on_loop(const std::function<void()>& fn) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!started_ || !loop_running_ || std::this_thread::get_id() == loop_.get_id()) {
    lock.unlock();
    fn();  // no loop: the caller's thread is the loop (step() tests), or it has ended
    return;
  }
  const int64_t ticket = ++loop_tasks_queued_;
  loop_tasks_.push_back(&fn);
  wake_.notify_all();
  loop_tasks_ran_.wait(lock, [&] { return loop_tasks_done_ >= ticket || !loop_running_; });
  if (loop_tasks_done_ < ticket) {  // the loop ended first and never took it
    auto at = std::find(loop_tasks_.begin(), loop_tasks_.end(), &fn);
    if (at != loop_tasks_.end()) loop_tasks_.erase(at);
    lock.unlock();
    fn();
  }
}

void ServingEngineImpl::run_loop_tasks() {
  std::vector<const std::function<void()>*> tasks;
  int64_t queued = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (loop_tasks_.empty()) return;
    std::swap(tasks, loop_tasks_);
    queued = loop_tasks_queued_;
  }
  for (const std::function<void()>* task : tasks) (*task)();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    loop_tasks_done_ = queued;
  }
  loop_tasks_ran_.notify_all();
}

RequestSnapshot ServingEngineImpl::request_snapshot(const Request& r, int64_t now) {
  const kvcache::BlockManager& bm = engine_->block_manager();
  RequestSnapshot s;
  s.id = r.id;
  s.prompt_tokens = r.usage.prompt_tokens;
  s.cached_tokens = r.usage.cached_tokens;
  s.generated_tokens = r.usage.completion_tokens;
  s.priority = r.req.priority;
  s.n = r.req.n;
  s.preemptions = r.usage.preemptions;
  s.age_s = static_cast<double>(now - r.submit_ns) * 1e-9;
  bool running = false, loading = false;
  std::unordered_set<int32_t> blocks;
  for (const Choice& c : r.choices) {
    if (c.seq < 0) continue;
    const SchedSequence& seq = scheduler_.get(c.seq);
    if (!seq.running()) continue;
    running = true;
    loading = loading || seq.loading();
    s.computed_tokens = std::max(s.computed_tokens, bm.length(seq.kv));
    for (int32_t b : bm.block_table(seq.kv)) {
      if (b >= 0) blocks.insert(b);
    }
  }
  s.blocks_held = static_cast<int64_t>(blocks.size());
  if (loading) {
    s.state = "loading";  // its prefix is being read from a tier below the pool
  } else if (running) {
    s.state = s.computed_tokens < s.prompt_tokens ? "prefilling" : "decoding";
  } else {
    s.state = r.usage.preemptions > 0 ? "preempted" : "waiting";
  }
  return s;
}

KvSnapshot ServingEngineImpl::snapshot(const SnapshotOptions& options) {
  KvSnapshot out;
  run_on_loop([&] {
    const int64_t now = clock_->now_ns();
    kvcache::BlockManager& bm = engine_->block_manager();
    out.uptime_s = static_cast<double>(now - start_ns_) * 1e-9;
    const model::ModelConfig& mc = engine_->model().config();
    out.model = mc.name.empty() ? mc.arch_name : mc.name + " (" + mc.arch_name + ")";
    snapshot_pool(bm, options.block_map, out);
    out.prefix_caching = engine_->config().enable_prefix_caching;
    const kvcache::BlockManagerStats& st = bm.stats();
    out.lookups = st.num_lookups;
    out.committed_blocks = st.num_committed_blocks;
    out.cow_copies = st.num_cow_copies;
    out.blocks_allocated = st.num_blocks_allocated;
    out.tiers[0].hit_blocks = st.num_hit_tokens / std::max<int64_t>(1, out.block_size);
    if (const kvcache::TierStack* tiers = engine_->tiers()) {
      snapshot_tiers(*tiers, out);
      const LoadDecisionStats& d = engine_->load_cost()->stats();
      out.tier_load_decisions = d.load;
      out.tier_recompute_decisions = d.recompute;
    }
    out.preemption = std::string(preemption_mode_name(config_.preemption));
    out.metrics = loop_metrics_;
    out.steps = loop_metrics_.steps;
    std::vector<Submitted> inbox;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      out.metrics.waiting += static_cast<int64_t>(inbox_.size());
      if (options.requests) {
        for (const Submitted& s : inbox_) {
          RequestSnapshot r;
          r.id = s.id;
          r.state = "waiting";
          r.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
          r.priority = s.req.priority;
          r.n = s.req.n;
          r.age_s = static_cast<double>(now - s.submit_ns) * 1e-9;
          out.requests.push_back(r);
        }
      }
    }
    if (options.requests) {
      for (const auto& [id, r] : requests_) out.requests.push_back(request_snapshot(*r, now));
      std::sort(out.requests.begin(), out.requests.end(),
                [](const RequestSnapshot& a, const RequestSnapshot& b) { return a.id < b.id; });
    }
    out.top_prefixes = largest_prefixes(bm, &history_, tokenizer_.get(), now, options.max_prefixes, options.preview_tokens);
  });
  return out;
}

SequenceKv ServingEngineImpl::sequence_kv(const SchedSequence& seq) {
  const kvcache::BlockManager& bm = engine_->block_manager();
  kvcache::TierStack* tiers = engine_->tiers();
  const int64_t B = engine_->kv_layout().block_size;
  SequenceKv s;
  s.running = seq.running();
  if (!s.running) return s;
  s.length = bm.length(seq.kv);
  if (const kvcache::KvSelectState* st = bm.select_state(seq.kv); st != nullptr) {
    s.kv_select = st->params.describe() + "; not prefix-cached";
    s.kv_evicted = st->num_evicted;
  }
  const std::vector<int32_t>& table = bm.block_table(seq.kv);
  // Blocks [first_loading, ...) are being read from the tiers of seq.load_runs, in order.
  const int64_t first_loading = bm.loading(seq.kv) ? bm.num_computed(seq.kv) / B : static_cast<int64_t>(table.size());
  for (size_t j = 0; j < table.size(); ++j) {
    BlockSnapshot b;
    b.index = static_cast<int64_t>(j);
    b.block = table[j];
    b.num_tokens = std::min<int64_t>(B, s.length - b.index * B);
    if (b.block < 0) {
      b.state = "released";
      s.blocks.push_back(std::move(b));
      continue;
    }
    b.ref_count = bm.pool().ref_count(b.block);
    const kvcache::BlockState state = bm.pool().state(b.block);
    b.state = state == kvcache::BlockState::kInUse ? "in use" : state == kvcache::BlockState::kCached ? "cached" : "free";
    b.hash = bm.index().contains(b.block) ? bm.index().hash(b.block) : 0;
    b.shared = b.ref_count > 1;
    if (tiers != nullptr && b.index >= first_loading) {
      b.state = "loading";
      int64_t k = b.index - first_loading;
      for (const kvcache::TierRun& run : seq.load_runs) {
        if (k < run.count) {
          b.loaded_from = std::string(tiers->tier(run.tier).name());
          break;
        }
        k -= run.count;
      }
    } else if (tiers != nullptr && b.hash != 0) {
      const int from = engine_->loaded_from(b.block, b.hash);
      if (from >= 0) b.loaded_from = std::string(tiers->tier(from).name());
      const uint32_t held = tiers->holders_now(b.hash);
      for (int t = 0; t < tiers->num_tiers(); ++t) {
        if ((held >> t) & 1u) b.copies.emplace_back(tiers->tier(t).name());
      }
    }
    s.blocks.push_back(std::move(b));
  }
  return s;
}

Result<RequestKv> ServingEngineImpl::request_kv(RequestId id) {
  Result<RequestKv> result = Status::not_found("no running or waiting request " + std::to_string(id) +
                                               " (finished requests are forgotten)");
  run_on_loop([&] {
    const int64_t now = clock_->now_ns();
    auto it = requests_.find(id);
    if (it == requests_.end()) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const Submitted& s : inbox_) {
        if (s.id != id) continue;
        RequestKv kv;
        kv.request.id = id;
        kv.request.state = "waiting";
        kv.request.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
        kv.request.age_s = static_cast<double>(now - s.submit_ns) * 1e-9;
        result = std::move(kv);
      }
      return;
    }
    const Request& r = *it->second;
    RequestKv kv;
    kv.request = request_snapshot(r, now);
    for (const Choice& c : r.choices) {
      if (c.seq < 0) continue;
      SequenceKv s = sequence_kv(scheduler_.get(c.seq));
      s.choice = c.index;
      kv.sequences.push_back(std::move(s));
    }
    result = std::move(kv);
  });
  return result;
}

Result<KvExplanation> ServingEngineImpl::explain(const ExplainRequest& request) {
  if (request.prompt.empty()) return Status::invalid_argument("explain: the prompt is empty (no tokens)");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= n_vocab_) return Status::invalid_argument("prompt token id " + std::to_string(id) + " outside the vocabulary");
  }
  KvExplanation out;
  run_on_loop([&] {
    ExplainContext c;
    c.blocks = &engine_->block_manager();
    c.history = &history_;
    c.ns = engine_->kv_namespace(request.cache_salt);
    c.prefix_caching = engine_->config().enable_prefix_caching;
    c.windowed = engine_->windowed();
    kvcache::KvSelectParams select = request.kv_select.value_or(engine_->config().kv_select);
    if (select.on() && engine_->check_kv_select(select).is_ok()) c.kv_select = select.describe();
    c.now_ns = clock_->now_ns();
    if (kvcache::TierStack* tiers = engine_->tiers()) {
      for (int t = 0; t < tiers->num_tiers(); ++t) c.tier_names.emplace_back(tiers->tier(t).name());
      c.tier_holders = [tiers](kvcache::BlockHash hash) { return tiers->holders_now(hash); };
    }
    out = explain_prefix(c, request.prompt, request.earlier_turns);
  });
  return out;
}

}  // namespace pagoda::engine
