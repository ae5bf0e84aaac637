// Scheduler: the policy at the top of engine/scheduler.h.
#include "engine/scheduler.h"

#include <algorithm>

#include "engine/step_cost.h"

namespace pagoda::engine {

void StepPlan::clear() {
  scheduled.clear();
  preempted.clear();
  admitted.clear();
  loaded.clear();
  refused.clear();
  num_tokens = 0;
  prefix_queried_tokens = prefix_hit_tokens = 0;
  swapped_out_blocks = swapped_in_blocks = swap_fallbacks = 0;
}

Scheduler::Scheduler(kvcache::BlockManager& blocks, const SchedulerOptions& options)
    : blocks_(blocks), options_(options) {
  CHECK(options_.max_num_seqs >= 1 && options_.max_num_batched_tokens >= options_.max_num_seqs)
      << "max_num_seqs " << options_.max_num_seqs << ", max_num_batched_tokens " << options_.max_num_batched_tokens;
  CHECK(options_.step_budget_ns >= 0 && options_.min_prefill_tokens >= 1) << "step budget " << options_.step_budget_ns
                                                                          << " ns, min prefill " << options_.min_prefill_tokens;
  running_.reserve(options_.max_num_seqs);
  plan_.scheduled.reserve(options_.max_num_seqs);
  plan_.preempted.reserve(options_.max_num_seqs);
  plan_.admitted.reserve(options_.max_num_seqs);
  plan_.loaded.reserve(options_.max_num_seqs);
  if (options_.tiers != nullptr) {
    for (int t = 0; t < options_.tiers->num_tiers(); ++t) media_.push_back(options_.tiers->tier(t).medium());
    CHECK_LE(options_.tiers->num_tiers(), kvcache::kMaxTiers);
  }
}

Scheduler::~Scheduler() {
  // Loads still in flight write into their blocks only from a tier's poll, which nobody calls
  // from here on (the tiers drop reads when they are destroyed).
  for (SchedSequence* s : running_) blocks_.free_sequence(s->kv);
  for (const Detached& d : detached_) blocks_.free_sequence(d.kv);
  for (auto& [id, s] : seqs_) {
    if (s.probe != 0) options_.tiers->drop_probe(s.probe);
    if (s.adopt >= 0) blocks_.free_sequence(s.adopt);
  }
}

void Scheduler::insert_ordered(std::vector<SchedSequence*>& list, SchedSequence* seq) {
  auto at = std::upper_bound(list.begin(), list.end(), seq,
                             [](const SchedSequence* a, const SchedSequence* b) { return a->key.before(b->key); });
  list.insert(at, seq);
}

void Scheduler::erase_from(std::vector<SchedSequence*>& list, SchedSequence* seq) {
  auto at = std::find(list.begin(), list.end(), seq);
  CHECK(at != list.end());
  list.erase(at);
}

SchedSequence& Scheduler::add(const SeqKey& key, std::vector<int32_t> tokens, int64_t max_tokens, int32_t slots,
                              const kvcache::KvNamespace& ns, const kvcache::KvSelectParams& select,
                              kvcache::SeqId adopt) {
  CHECK(!tokens.empty() && slots >= 1);
  CHECK(adopt < 0 || blocks_.has_sequence(adopt));
  CHECK(!select.on() || slots == 1) << "selecting sequences are never forked";
  const SchedSeqId id = next_id_++;
  SchedSequence& s = seqs_[id];
  s.id = id;
  s.key = key;
  s.tokens = std::move(tokens);
  s.max_tokens = std::max<int64_t>(max_tokens, static_cast<int64_t>(s.tokens.size()));
  s.slots = slots;
  s.ns = ns;
  s.select = select;
  s.select_prompt = select.on() ? static_cast<int64_t>(s.tokens.size()) : 0;
  s.adopt = adopt;
  insert_ordered(waiting_, &s);
  return s;
}

SchedSequence& Scheduler::get(SchedSeqId id) {
  auto it = seqs_.find(id);
  CHECK(it != seqs_.end()) << "unknown scheduler sequence " << id;
  return it->second;
}

void Scheduler::remove(SchedSeqId id) {
  SchedSequence& s = get(id);
  if (s.probe != 0) options_.tiers->drop_probe(s.probe);
  if (s.running() && s.loading()) {  // its gets still write into its blocks: free them later
    detached_.push_back({s.kv, s.load});
    erase_from(running_, &s);
    running_slots_ -= s.slots;
  } else if (s.running()) {
    blocks_.free_sequence(s.kv);
    erase_from(running_, &s);
    running_slots_ -= s.slots;
  } else {
    erase_from(waiting_, &s);
  }
  if (s.adopt >= 0) blocks_.free_sequence(s.adopt);
  seqs_.erase(id);
}

kvcache::SeqId Scheduler::release_kv(SchedSeqId id) {
  SchedSequence& s = get(id);
  CHECK(s.running() && !s.loading());
  const kvcache::SeqId kv = s.kv;
  erase_from(running_, &s);
  running_slots_ -= s.slots;
  seqs_.erase(id);
  return kv;
}

SchedSequence& Scheduler::fork(SchedSequence& parent, const SeqKey& key) {
  CHECK(parent.running() && parent.slots > 1);
  CHECK_EQ(blocks_.length(parent.kv), static_cast<int64_t>(parent.tokens.size()));
  const SchedSeqId id = next_id_++;
  SchedSequence& child = seqs_[id];
  child.id = id;
  child.key = key;
  child.tokens = parent.tokens;
  child.max_tokens = parent.max_tokens;
  child.slots = 1;
  child.ns = parent.ns;
  CHECK(!uncached(parent)) << "windowed or selecting sequences are never forked";
  child.kv = blocks_.fork(parent.kv);
  child.fed = parent.fed;
  child.admitted_cached = parent.admitted_cached;
  child.num_admissions = parent.num_admissions;
  --parent.slots;  // running_slots_ unchanged: the slot moves to the child
  insert_ordered(running_, &child);
  return child;
}

void Scheduler::preempt(SchedSequence& seq) {
  CHECK(!seq.loading()) << "a loading sequence is never a victim";
  if (options_.preemption == PreemptionMode::kSwap) seq.swapped = swap_out(seq);
  blocks_.free_sequence(seq.kv);
  seq.kv = -1;
  seq.fed = 0;
  erase_from(running_, &seq);
  running_slots_ -= seq.slots;
  insert_ordered(waiting_, &seq);
  plan_.preempted.push_back(&seq);
  // Its load may have finished in this step's poll_tiers(): no longer running, it is not one of
  // the plan's loaded sequences (whose blocks the owner reads; it has none now).
  std::erase(plan_.loaded, &seq);
}

int64_t Scheduler::blocks_needed(const SchedSequence& seq, int64_t n) const {
  const SchedulerOptions::Windows& w = options_.windows;
  if (w.stream_window <= 0) return blocks_.plan(seq.kv, n).num_new_blocks;
  const int64_t B = blocks_.pool().layout().block_size;
  // Engine::make_room frees the oldest non-sink blocks before the append takes new ones: the
  // step's net need is the blocks held afterwards minus those held now.
  int64_t length = blocks_.length(seq.kv);
  const int64_t held = static_cast<int64_t>(blocks_.block_table(seq.kv).size());
  while (length + n > w.stream_sinks + w.stream_window) length -= B;
  return std::max<int64_t>(0, (length + n + B - 1) / B - held);
}

int64_t Scheduler::max_rows(const SchedSequence& seq, int64_t begin, int64_t n) const {
  if (options_.windows.max_chunk > 0) n = std::min(n, options_.windows.max_chunk);
  if (!seq.select.on()) return n;
  if (seq.select.method == kvcache::KvSelectMethod::kSnapKv && begin < seq.select_prompt) {
    return std::min(n, seq.select_prompt - begin);  // the prompt's last chunk ends at its end
  }
  return std::min(n, kvcache::kv_select_max_chunk(seq.select));
}

int64_t Scheduler::kv_cap(const SchedSequence& seq) const {
  if (seq.select.method == kvcache::KvSelectMethod::kH2O) return seq.select.budget;
  if (seq.select.method == kvcache::KvSelectMethod::kSnapKv) return std::max(seq.select_prompt, seq.select.budget);
  return options_.windows.kv_token_cap;
}

void Scheduler::enter_running(SchedSequence& seq) {
  ++seq.num_admissions;
  erase_from(waiting_, &seq);
  insert_ordered(running_, &seq);
  running_slots_ += seq.slots;
  plan_.admitted.push_back(&seq);
}

void Scheduler::schedule_first(SchedSequence& seq, int64_t& token_budget, int64_t& reserved_blocks) {
  const int64_t n_tokens = static_cast<int64_t>(seq.tokens.size());
  const int64_t from = seq.fed = blocks_.length(seq.kv);
  const int64_t n = max_rows(seq, from, std::min(n_tokens - from, token_budget));
  reserved_blocks += blocks_needed(seq, n);
  seq.fed = from + n;
  token_budget -= n;
  plan_.scheduled.push_back({&seq, from, n});
  plan_.num_tokens += n;
}

Scheduler::Adoption Scheduler::admit_adopted(SchedSequence& seq, int64_t& token_budget, int64_t& reserved_blocks) {
  const int64_t n_tokens = static_cast<int64_t>(seq.tokens.size());
  const kvcache::SeqId kv = seq.adopt;
  const int64_t have = blocks_.length(kv);
  int64_t limit = blocks_.num_available_blocks() - reserved_blocks;
  if (!running_.empty()) limit -= options_.watermark_blocks;
  const bool usable = !uncached(seq) && have < n_tokens && blocks_.num_computed(kv) == have;
  const bool fits = usable && blocks_.plan(kv, n_tokens - have).num_new_blocks <= limit;
  if (!fits) {
    if (usable && !running_.empty()) return Adoption::kWait;  // holding its KV, like a load
    seq.adopt = -1;
    blocks_.free_sequence(kv);  // its committed blocks stay cached: the ordinary way finds them
    return Adoption::kDropped;
  }
  seq.adopt = -1;
  seq.kv = kv;
  if (options_.enable_prefix_caching) {
    plan_.prefix_queried_tokens += n_tokens;
    plan_.prefix_hit_tokens += have;
  }
  seq.admitted_cached = seq.admitted_pool = have;
  seq.admitted_tier.fill(0);
  seq.swap_in = seq.swapped = false;
  enter_running(seq);
  schedule_first(seq, token_budget, reserved_blocks);
  return Adoption::kAdmitted;
}

bool Scheduler::try_admit(SchedSequence& seq, int64_t& token_budget, int64_t& reserved_blocks) {
  if (seq.adopt >= 0) {
    const Adoption a = admit_adopted(seq, token_budget, reserved_blocks);
    if (a != Adoption::kDropped) return a == Adoption::kAdmitted;
  }
  const int64_t n_tokens = static_cast<int64_t>(seq.tokens.size());
  const SchedulerOptions::Windows& w = options_.windows;
  const bool cached = !uncached(seq);
  const int64_t cap = kv_cap(seq);
  kvcache::PrefixMatch hit;
  if (options_.enable_prefix_caching && cached) hit = blocks_.match_prefix(seq.tokens, seq.ns);
  const kvcache::KvPlan whole = blocks_.plan(hit, cap > 0 ? std::min(n_tokens, cap) : n_tokens);
  int64_t limit = blocks_.num_available_blocks() - reserved_blocks;
  if (!running_.empty()) limit -= options_.watermark_blocks;  // alone, it may use the whole pool
  if (whole.num_new_blocks > limit) return false;  // `hit` unpins
  int64_t n_load = 0;  // tokens to load from the tiers (whole blocks after the hit)
  items_scratch_.clear();
  if (options_.tiers != nullptr && options_.enable_prefix_caching && cached &&
      !plan_load(seq, hit, items_scratch_, n_load)) {
    waiting_for_tier_ = true;
    return false;  // a tier has not answered yet: admission waits for it
  }
  kvcache::SequenceOptions o;
  o.ns = seq.ns;
  o.priority = seq.key.priority;
  o.cacheable = cached;
  o.select = seq.select;
  o.select_prompt = seq.select_prompt;
  const int64_t table_tokens = w.stream_window > 0 ? std::min(seq.max_tokens, w.kv_token_cap) : seq.max_tokens;
  seq.kv = blocks_.add_sequence(table_tokens, o);
  if (options_.enable_prefix_caching && cached) {
    plan_.prefix_queried_tokens += n_tokens;
    plan_.prefix_hit_tokens += hit.num_tokens();
  }
  if (!hit.empty()) blocks_.adopt(seq.kv, std::move(hit));
  const int64_t computed = blocks_.length(seq.kv);
  seq.admitted_cached = seq.admitted_pool = computed;
  seq.admitted_tier.fill(0);
  seq.swap_in = seq.swapped && n_load > 0;
  seq.swapped = false;
  enter_running(seq);
  if (n_load > 0) {
    seq.fed = computed;
    start_load(seq, computed, items_scratch_, n_load);
    // A tier that answers during the call (the host tier copies in get()) has the blocks in
    // already: finish the load now and schedule the rest in this step rather than the next
    // (a whole step of the others' prefill or decode later, on the request's TTFT).
    options_.tiers->poll();
    std::optional<kvcache::LoadResult> done = options_.tiers->take_load(seq.load);
    if (!done) return true;  // scheduled once its blocks are in (poll_tiers)
    finish_load(seq, *done);
    plan_.loaded.push_back(&seq);
  }
  schedule_first(seq, token_budget, reserved_blocks);
  return true;
}

SchedSequence* Scheduler::victim() {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (!(*it)->loading()) return *it;
  }
  return nullptr;
}

int64_t Scheduler::step_token_cap(int64_t num_decodes) const {
  const int64_t cap = options_.max_num_batched_tokens;
  if (options_.step_budget_ns <= 0 || options_.step_cost == nullptr || num_decodes == 0) return cap;
  const int64_t fit = options_.step_cost->tokens_within(options_.step_budget_ns);
  return std::min(cap, std::max(fit, num_decodes + options_.min_prefill_tokens));
}

const StepPlan& Scheduler::schedule() {
  plan_.clear();
  if (options_.tiers != nullptr) poll_tiers();
  // Decodes first: each running sequence with one pending token gets its row; prefill chunks
  // share the rest. running slots <= max_num_seqs <= max_num_batched_tokens, so decodes fit.
  int64_t num_decodes = 0;
  for (const SchedSequence* s : running_) {
    if (!s->loading() && static_cast<int64_t>(s->tokens.size()) - s->fed == 1) ++num_decodes;
  }
  const int64_t step_cap = step_token_cap(num_decodes);
  int64_t prefill_budget = step_cap - num_decodes;
  int64_t reserved = 0;  // blocks promised to sequences scheduled earlier in this step
  size_t i = 0;
  while (i < running_.size()) {
    SchedSequence* s = running_[i];
    if (s->loading()) {  // holds its blocks; joins once they are in
      ++i;
      continue;
    }
    const int64_t computed = s->fed;
    const int64_t pending = static_cast<int64_t>(s->tokens.size()) - computed;
    CHECK_GE(pending, 1) << "a running sequence with nothing to feed (the owner samples or removes it)";
    const int64_t n = max_rows(*s, computed, pending == 1 ? 1 : std::min(pending, prefill_budget));
    if (n == 0) {  // a prefill without budget this step: it waits, holding its blocks
      ++i;
      continue;
    }
    const int64_t need = blocks_needed(*s, n);
    bool preempted_self = false;
    while (need > blocks_.num_available_blocks() - reserved) {
      SchedSequence* v = victim();  // lowest priority, latest, not loading; never one scheduled before i
      CHECK(v != nullptr);          // s itself is a candidate
      preempted_self = v == s;
      preempt(*v);
      if (preempted_self) break;
    }
    if (preempted_self) continue;  // it was the last one
    reserved += need;
    s->fed = computed + n;
    if (pending > 1) prefill_budget -= n;
    plan_.scheduled.push_back({s, computed, n});
    plan_.num_tokens += n;
    ++i;
  }
  if (!plan_.preempted.empty()) return plan_;
  int64_t token_budget = step_cap - plan_.num_tokens;
  while (!waiting_.empty() && token_budget > 0) {
    SchedSequence& w = *waiting_.front();
    if (running_slots_ + w.slots > options_.max_num_seqs) break;
    waiting_for_tier_ = false;
    if (!try_admit(w, token_budget, reserved)) {
      // The whole pool is not enough for it (not: a tier has yet to answer its probe).
      if (running_.empty() && !waiting_for_tier_ && num_loading() == 0) plan_.refused.push_back(&w);
      break;
    }
  }
  return plan_;
}

}  // namespace pagoda::engine
