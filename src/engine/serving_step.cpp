// ServingEngine's step: inbox -> schedule -> one forward pass -> sample -> deliver (the steps
// are listed at the top of engine/serving_engine.h).
#include <algorithm>
#include <thread>

#include "engine/serving_engine.h"

namespace pagoda::engine {

namespace {
constexpr int64_t kMinPrefillSample = 64;  // steps of fewer tokens say little about prefill speed
}  // namespace

void ServingEngineImpl::set_cached_usage(Request& r, const SchedSequence& s) {
  r.usage.cached_tokens = s.admitted_cached;
  const kvcache::TierStack* tiers = engine_->tiers();
  if (tiers == nullptr) return;
  r.usage.num_cached_sources = 1 + tiers->num_tiers();
  r.usage.cached_by_tier[0] = {"pool", s.admitted_pool};
  for (int t = 0; t < tiers->num_tiers(); ++t) {
    r.usage.cached_by_tier[static_cast<size_t>(t) + 1] = {tiers->tier(t).name(), s.admitted_tier[static_cast<size_t>(t)]};
  }
}

void ServingEngineImpl::log_step_plan(const StepPlan& plan) const {
  int64_t decodes = 0, prefill_tokens = 0;
  for (const ScheduledSeq& s : plan.scheduled) {
    if (s.n_tokens == 1 && s.begin + 1 == static_cast<int64_t>(s.seq->tokens.size())) {
      ++decodes;
    } else {
      prefill_tokens += s.n_tokens;
    }
  }
  std::string line = "step " + std::to_string(loop_metrics_.steps + 1) + ": " + std::to_string(plan.scheduled.size()) +
                     " sequences (" + std::to_string(decodes) + " decoding, " +
                     std::to_string(plan.scheduled.size() - static_cast<size_t>(decodes)) + " prefilling " +
                     std::to_string(prefill_tokens) + " tokens), " + std::to_string(plan.num_tokens) + " tokens";
  if (!plan.admitted.empty()) {
    line += "; admitted " + std::to_string(plan.admitted.size()) + " (prefix hit " +
            std::to_string(plan.prefix_hit_tokens) + " of " + std::to_string(plan.prefix_queried_tokens) + " tokens)";
  }
  if (!plan.preempted.empty()) line += "; preempted " + std::to_string(plan.preempted.size());
  if (!plan.loaded.empty()) line += "; loads done " + std::to_string(plan.loaded.size());
  if (plan.swapped_out_blocks > 0) line += "; swapped out " + std::to_string(plan.swapped_out_blocks) + " blocks";
  line += "; waiting " + std::to_string(scheduler_.num_waiting()) + ", available blocks " +
          std::to_string(engine_->block_manager().num_available_blocks());
  engine_->logger().debug(line);
}

void ServingEngineImpl::note_loaded_blocks(const SchedSequence& s) {
  // The confirmed blocks follow the pool hit in the order of s.load_runs.
  const kvcache::BlockManager& bm = engine_->block_manager();
  const int64_t bs = engine_->kv_layout().block_size;
  const std::vector<int32_t>& table = bm.block_table(s.kv);
  int64_t j = s.admitted_pool / bs;
  const int64_t end = s.admitted_cached / bs;
  for (const kvcache::TierRun& run : s.load_runs) {
    for (int64_t k = 0; k < run.count && j < end; ++k, ++j) {
      const int32_t b = table[static_cast<size_t>(j)];
      if (bm.index().contains(b)) engine_->note_loaded(b, run.tier, bm.index().hash(b));
    }
  }
}

void ServingEngineImpl::drain_inbox(bool* abort_all) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::swap(inbox_local_, inbox_);
  std::swap(aborts_local_, aborts_);
  *abort_all = abort_all_;
}

void ServingEngineImpl::admit_new(Submitted& s) {
  auto r = std::make_unique<Request>();
  r->id = s.id;
  r->req = std::move(s.req);
  r->observer = std::move(s.observer);
  r->max_tokens = s.max_tokens;
  r->submit_ns = s.submit_ns;
  r->pin = std::move(s.pin);
  r->usage.prompt_tokens = static_cast<int64_t>(r->req.prompt.size());
  r->num_open = r->req.n;
  r->choices.reserve(r->req.n);
  for (int i = 0; i < r->req.n; ++i) {
    SamplingParams p = r->req.sampling;
    p.seed = r->req.sampling.seed + static_cast<uint64_t>(i);
    r->choices.emplace_back(i, p, n_vocab_);
    if (r->req.constraint) r->choices.back().constraint = r->req.constraint->clone();
    // The text continues the prompt: a completion's first piece keeps its space (" shining"
    // after "The sun was"), as decoding prompt + completion together gives.
    r->choices.back().text.emplace(*tokenizer_, r->req.stop, r->req.prompt.empty() ? -1 : r->req.prompt.back());
  }
  const kvcache::KvNamespace ns = engine_->kv_namespace(r->req.cache_salt);
  const kvcache::KvSelectParams select = r->req.kv_select.value_or(kvcache::KvSelectParams{});  // resolved at submit
  if (select.on()) engine_->reserve_kv_select(select, config_.max_num_seqs);  // grows once per larger budget
  if (engine_->windowed() || select.on()) {
    // Windowed and selecting sequences are never forked: each choice prefills the prompt on its own.
    if (r->req.adopt_kv >= 0) engine_->block_manager().free_sequence(r->req.adopt_kv);  // their KV is private
    r->req.adopt_kv = -1;
    r->forked = true;
    for (int i = 0; i < r->req.n; ++i) {
      const SeqKey key{r->req.priority, static_cast<uint64_t>(r->id), i};
      SchedSequence& seq = scheduler_.add(key, r->req.prompt, r->usage.prompt_tokens + r->max_tokens, 1, ns, select);
      r->choices[i].seq = seq.id;
      owners_[seq.id] = {r.get(), i};
    }
  } else {
    const SeqKey key{r->req.priority, static_cast<uint64_t>(r->id), 0};
    SchedSequence& seq =
        scheduler_.add(key, r->req.prompt, r->usage.prompt_tokens + r->max_tokens, r->req.n, ns, {}, r->req.adopt_kv);
    r->req.adopt_kv = -1;  // the scheduler's now
    r->choices[0].seq = seq.id;
    owners_[seq.id] = {r.get(), 0};
  }
  requests_[r->id] = std::move(r);
}

void ServingEngineImpl::fork_choices(Request& r) {
  r.forked = true;
  SchedSequence& parent = scheduler_.get(r.choices[0].seq);
  for (size_t i = 1; i < r.choices.size(); ++i) {
    const SeqKey key{r.req.priority, static_cast<uint64_t>(r.id), static_cast<int32_t>(i)};
    SchedSequence& child = scheduler_.fork(parent, key);
    r.choices[i].seq = child.id;
    owners_[child.id] = {&r, static_cast<int>(i)};
  }
}

void ServingEngineImpl::sample_choice(Request& r, Choice& c, const float* logits, int64_t now) {
  SchedSequence& seq = scheduler_.get(c.seq);
  std::copy(logits, logits + n_vocab_, row_.begin());  // the sampler's penalty edits its row
  if (c.constraint) {
    c.constraint->mask(row_);
    if (c.constraint->dead()) {
      end_choice(r, c, FinishReason::kStop);  // nothing allowed: end rather than sample from nothing
      return;
    }
  }
  // The completion so far is the tail of seq.tokens (each sampled token is pushed below).
  const std::span<const int32_t> generated =
      std::span<const int32_t>(seq.tokens).last(static_cast<size_t>(c.num_generated));
  const int32_t token = c.sampler.sample(row_, seq.tokens, generated);
  ++c.num_generated;
  ++r.usage.completion_tokens;
  ++loop_metrics_.generation_tokens;
  if (!r.got_token) {
    r.got_token = true;
    r.usage.ttft_s = static_cast<double>(now - r.submit_ns) * 1e-9;
    loop_metrics_.ttft.observe(r.usage.ttft_s);
  }
  if (c.num_generated > 1) loop_metrics_.inter_token.observe(static_cast<double>(now - c.last_token_ns) * 1e-9);
  c.last_token_ns = now;
  if (!r.touched) {
    r.touched = true;
    touched_.push_back(&r);
  }
  const auto& stop_ids = r.req.stop_token_ids;
  if ((!r.req.ignore_eos && token == tokenizer_->eos_id()) ||
      std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
    end_choice(r, c, FinishReason::kStop);  // the stop token is counted, never shown
    return;
  }
  TokenEvent& ev = r.events.emplace_back();
  ev.choice = c.index;
  ev.token = token;
  if (r.req.logprobs >= 0) {
    log_softmax_top(std::span<const float>(logits, n_vocab_), token, r.req.logprobs, index_scratch_, logprobs_);
    ev.chosen = {token, logprobs_.chosen};
    for (size_t i = 0; i < logprobs_.top_ids.size(); ++i) ev.top.push_back({logprobs_.top_ids[i], logprobs_.top_logprobs[i]});
  }
  if (c.constraint) c.constraint->accept(token);
  if (c.text->push(token, ev.text) || (c.constraint && c.constraint->finished())) {
    end_choice(r, c, FinishReason::kStop);
  } else if (c.num_generated >= r.max_tokens) {
    end_choice(r, c, FinishReason::kLength);
  } else {
    seq.tokens.push_back(token);  // fed by the next step
  }
}

void ServingEngineImpl::end_choice(Request& r, Choice& c, FinishReason reason) {
  ChoiceEnd& end = r.ends.emplace_back();
  end.choice = c.index;
  end.reason = reason;
  if (!c.text->stopped()) c.text->finish(end.text);
  c.done = true;
  --r.num_open;
  const bool selecting = r.req.kv_select.has_value() && r.req.kv_select->on();
  if (r.req.park_kv && r.req.n == 1 && !engine_->windowed() && !selecting && r.pin == nullptr) {
    parked_[r.id] = scheduler_.release_kv(c.seq);  // with_parked takes it
  } else {
    scheduler_.remove(c.seq);  // its blocks are free (or cached) from now on
  }
  owners_.erase(c.seq);
  c.seq = -1;
  ++(reason == FinishReason::kStop ? loop_metrics_.finished_stop : loop_metrics_.finished_length);
}

void ServingEngineImpl::deliver(Request& r) {
  r.touched = false;
  if (!r.events.empty()) r.observer->on_tokens(r.events);
  r.events.clear();
  for (const ChoiceEnd& end : r.ends) r.observer->on_choice_end(end);
  r.ends.clear();
  if (r.num_open == 0) finish_request(r, Status::ok());
}

void ServingEngineImpl::finish_request(Request& r, const Status& status) {
  for (Choice& c : r.choices) {
    if (c.seq < 0) continue;
    scheduler_.remove(c.seq);
    owners_.erase(c.seq);
    c.seq = -1;
  }
  r.usage.e2e_s = static_cast<double>(clock_->now_ns() - r.submit_ns) * 1e-9;
  if (r.pin == nullptr) loop_metrics_.e2e.observe(r.usage.e2e_s);  // a pin is no completion
  if (status.code() == StatusCode::kAborted || status.code() == StatusCode::kUnavailable) {
    ++loop_metrics_.finished_abort;
  } else if (!status.is_ok()) {
    ++loop_metrics_.finished_error;
  }
  std::shared_ptr<RequestObserver> observer = std::move(r.observer);
  const RequestUsage usage = r.usage;
  requests_.erase(r.id);  // r is gone
  observer->on_finish(status, usage);
}

bool ServingEngineImpl::step_locked_out() {
  bool abort_all = false;
  drain_inbox(&abort_all);
  bool worked = !inbox_local_.empty() || !aborts_local_.empty();
  for (Submitted& s : inbox_local_) admit_new(s);
  inbox_local_.clear();
  for (RequestId id : aborts_local_) {
    auto it = requests_.find(id);
    if (it != requests_.end()) finish_request(*it->second, Status::aborted("request " + std::to_string(id) + " aborted"));
  }
  aborts_local_.clear();
  if (abort_all) {
    while (!requests_.empty()) finish_request(*requests_.begin()->second, Status::unavailable("the server is shutting down"));
  }
  expire_pins();
  if (requests_.empty() && !scheduler_.tier_work_pending()) {
    publish_metrics();
    return worked;
  }

  const StepPlan& plan = scheduler_.schedule();
  const int64_t now = clock_->now_ns();
  if (engine_->logger().level() <= LogLevel::kDebug) log_step_plan(plan);  // -v: each step's decisions
  for (const SchedSequence* s : plan.preempted) {
    ++owners_.at(s->id).request->usage.preemptions;
    ++loop_metrics_.preemptions;
  }
  refuse_unfittable(plan);
  loop_metrics_.swapped_out_blocks += plan.swapped_out_blocks;
  loop_metrics_.swapped_in_blocks += plan.swapped_in_blocks;
  loop_metrics_.swap_fallbacks += plan.swap_fallbacks;
  loop_metrics_.prefix_queried_tokens += plan.prefix_queried_tokens;
  loop_metrics_.prefix_hit_tokens += plan.prefix_hit_tokens;
  for (const SchedSequence* s : plan.admitted) {
    Request& r = *owners_.at(s->id).request;
    if (r.scheduled_once) continue;
    r.scheduled_once = true;
    r.usage.queue_s = static_cast<double>(now - r.submit_ns) * 1e-9;
    set_cached_usage(r, *s);
    loop_metrics_.queue.observe(r.usage.queue_s);
    loop_metrics_.prompt_tokens += r.usage.prompt_tokens;
  }
  for (const SchedSequence* s : plan.loaded) {  // a first admission's load is in: the final count
    note_loaded_blocks(*s);
    auto owner = owners_.find(s->id);
    if (owner != owners_.end() && s->num_admissions == 1) set_cached_usage(*owner->second.request, *s);
  }
  if (plan.scheduled.empty()) {  // after a preemption or a refusal, or while admitted sequences load
    publish_metrics();
    if (scheduler_.tier_work_pending()) std::this_thread::yield();
    return worked || !plan.preempted.empty() || !plan.refused.empty() || scheduler_.tier_work_pending() ||
           !plan.loaded.empty();
  }

  step_seqs_.clear();
  for (const ScheduledSeq& e : plan.scheduled) {
    step_seqs_.push_back({e.seq->kv, std::span<const int32_t>(e.seq->tokens).subspan(e.begin, e.n_tokens), e.completes()});
  }
  const int64_t step_start = clock_->now_ns();
  const Status status = engine_->step(step_seqs_, /*all_rows=*/false, logits_.data());
  const int64_t step_ns = clock_->now_ns() - step_start;
  if (status.is_ok()) step_cost_.observe(plan.num_tokens, step_ns);
  if (status.is_ok() && engine_->load_cost() != nullptr && plan.num_tokens >= kMinPrefillSample) {
    engine_->load_cost()->observe_prefill(plan.num_tokens, step_ns);
  }
  if (!status.is_ok()) {  // a broken promise of the scheduler: fail what was in the step
    std::vector<RequestId> failed;
    for (const ScheduledSeq& e : plan.scheduled) failed.push_back(owners_.at(e.seq->id).request->id);
    for (RequestId id : failed) {
      auto it = requests_.find(id);
      if (it != requests_.end()) finish_request(*it->second, status.with_context("forward step"));
    }
    publish_metrics();
    return true;
  }
  ++loop_metrics_.steps;
  const int64_t t = clock_->now_ns();
  history_.mark_tick(engine_->block_manager().logical_now(), t);
  int64_t row = 0;
  for (const ScheduledSeq& e : plan.scheduled) {
    if (!step_seqs_[&e - plan.scheduled.data()].logits) continue;
    const float* logits = logits_.data() + row++ * n_vocab_;
    const Owner owner = owners_.at(e.seq->id);
    Request& r = *owner.request;
    if (r.pin != nullptr) {  // a pin's prompt is computed: pin it instead of sampling (r ends)
      complete_pin(r);
      continue;
    }
    if (!r.forked) {  // the prompt's first sample: fork the choices, each draws from this row
      fork_choices(r);
      for (Choice& c : r.choices) sample_choice(r, c, logits, t);
    } else {
      sample_choice(r, r.choices[owner.choice], logits, t);
    }
  }
  for (Request* r : touched_) deliver(*r);
  touched_.clear();
  publish_metrics();
  return true;
}

}  // namespace pagoda::engine
