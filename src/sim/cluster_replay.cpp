#include "sim/cluster_replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <queue>
#include <unordered_map>
#include <utility>

#include "sim/cluster_instance.h"
#include "sim/shared_pool.h"

namespace pagoda::sim {

double StepCostProfile::step_seconds(int64_t prefill_tokens, int64_t decoding) const {
  double s = static_cast<double>(prefill_tokens) / prefill_tps;
  if (decoding > 0) s += (1.0 + static_cast<double>(decoding - 1) * decode_batch_cost) / decode_tps;
  return s;
}

namespace {

using detail::Instance;
using detail::kNever;
using detail::Request;

class Cluster {
 public:
  Cluster(const std::vector<TraceRequest>& trace, const ClusterReplayOptions& o) : trace_(trace), o_(o) {}

  Result<ClusterReplayResult> run() {
    engine::SchedulerOptions so;
    so.max_num_seqs = o_.max_num_seqs;
    so.max_num_batched_tokens = o_.max_num_batched_tokens;
    so.step_budget_ns = static_cast<int64_t>(o_.step_budget_ms * 1e6);
    kvcache::KvLayout layout;  // a stand-in: the pool holds no KV bytes
    layout.n_layer = 1;
    layout.n_kv_head = 1;
    layout.head_dim = 2;
    layout.block_size = o_.block_size;
    layout.dtype = kernels::KvDType::kF16;
    const bool global = o_.global_pool_tokens > 0;
    if (global) {
      PAGODA_ASSIGN_OR_RETURN(shared_, SharedPool::create(layout, o_.global_pool_tokens / o_.block_size, o_.eviction, clock_));
    }
    pd_ = o_.prefill_instances > 0;
    const int n_instances = pd_ ? o_.prefill_instances + o_.decode_instances : o_.instances;
    for (int i = 0; i < n_instances; ++i) {
      const int64_t blocks = o_.capacity_tokens / o_.block_size;
      PAGODA_ASSIGN_OR_RETURN(kvcache::BlockPool pool, global ? kvcache::BlockPool::create(layout, blocks)
                                                              : kvcache::BlockPool::create_without_memory(layout, blocks));
      instances_.push_back(std::make_unique<Instance>(std::move(pool), o_.eviction, so,
                                                      global ? shared_->client() : nullptr, clock_, quiet_, o_.cost));
    }
    requests_.resize(trace_.size());
    res_.per_instance.resize(static_cast<size_t>(n_instances));
    for (int i = pd_ ? o_.prefill_instances : n_instances; i < n_instances; ++i) instances_[static_cast<size_t>(i)]->stats.decode = true;
    size_t next = 0;
    while (true) {
      const double t_arrival = next < trace_.size() ? trace_[next].timestamp_ms * 1e-3 * o_.time_scale : kNever;
      Instance* first = nullptr;
      for (auto& inst : instances_) {
        if (inst->busy && (first == nullptr || inst->busy_until < first->busy_until)) first = inst.get();
      }
      const double t_step = first != nullptr ? first->busy_until : kNever;
      const double t_transfer = transfers_.empty() ? kNever : transfers_.top().first;
      if (t_arrival == kNever && t_step == kNever && t_transfer == kNever) break;
      if (t_transfer <= t_arrival && t_transfer <= t_step) {
        now_ = t_transfer;
        const int64_t r = transfers_.top().second;
        transfers_.pop();
        Instance& d = *instances_[static_cast<size_t>(requests_[static_cast<size_t>(r)].instance)];
        d.arrived.push_back(r);
        adopt_arrived(d);
        if (!d.busy) start_step(d);
      } else if (t_arrival <= t_step) {
        now_ = t_arrival;
        arrive(static_cast<int64_t>(next++));
      } else {
        now_ = t_step;
        finish_step(*first);
        start_step(*first);
      }
    }
    return finish();
  }

 private:
  void arrive(int64_t r) {
    const TraceRequest& t = trace_[static_cast<size_t>(r)];
    Request& q = requests_[static_cast<size_t>(r)];
    q.arrival_s = now_;
    q.prompt = t.input_length;
    q.outputs = std::max<int64_t>(1, t.output_length);
    q.blocks = (q.prompt + q.outputs + o_.block_size - 1) / o_.block_size;
    ++res_.requests;
    res_.prompt_tokens += q.prompt;
    std::vector<int32_t> tokens;
    synthesize_prompt(t, o_.trace, tokens);
    // The router's view of every instance, then its policy's pick.
    std::vector<router::WorkerLoad> loads;
    const size_t candidates = pd_ ? static_cast<size_t>(o_.prefill_instances) : instances_.size();
    for (size_t i = 0; i < candidates; ++i) {
      const auto& inst = instances_[i];
      router::WorkerLoad w = inst->load;
      w.available = true;
      w.overlap_blocks = inst->bm.plan(tokens, kvcache::KvNamespace{}).num_cached_tokens / o_.block_size;
      loads.push_back(w);
    }
    const router::RequestCost cost{q.prompt, q.blocks, o_.block_size};
    const router::Choice choice = router::choose_worker(o_.policy, loads, cost, o_.overlap_weight, rr_cursor_++);
    CHECK(choice.worker >= 0) << "every instance is available";
    Instance& inst = *instances_[static_cast<size_t>(choice.worker)];
    q.instance = choice.worker;
    q.pending_prefill = q.prompt - loads[static_cast<size_t>(choice.worker)].overlap_blocks * o_.block_size;
    inst.load.pending_prefill_tokens += q.pending_prefill;
    inst.load.active_blocks += q.blocks;
    ++inst.load.in_flight;
    ++inst.stats.requests;
    inst.stats.prompt_tokens += q.prompt;
    engine::SeqKey key;
    key.arrival = static_cast<uint64_t>(r);
    // P/D: the prefill instance runs the prompt to its first token only.
    const int64_t max_tokens = q.prompt + (pd_ ? 1 : q.outputs);
    engine::SchedSequence& s = inst.sched.add(key, std::move(tokens), max_tokens, 1, kvcache::KvNamespace{});
    q.id = s.id;
    inst.request_of[s.id] = r;
    if (!inst.busy) start_step(inst);
  }

  // The request leaves inst (its KV freed, committed blocks cached) and the router's books.
  void leave(Instance& inst, Request& q) {
    inst.sched.remove(q.id);
    inst.request_of.erase(q.id);
    if (q.first_token_s < 0) inst.load.pending_prefill_tokens -= q.pending_prefill;
    inst.load.active_blocks -= q.blocks;
    --inst.load.in_flight;
  }

  void end_request(Instance& inst, Request& q, bool finished) {
    leave(inst, q);
    q.done = true;
    if (finished) {
      ++res_.finished;
    } else {
      ++res_.rejected;
    }
  }

  void start_step(Instance& inst) {
    inst.busy = false;
    inst.busy_until = kNever;
    if (inst.sched.empty()) return;
    const engine::StepPlan& plan = inst.sched.schedule();
    const int64_t plan_tokens = plan.num_tokens;
    inst.stats.preemptions += static_cast<int64_t>(plan.preempted.size());
    double load_s = 0;  // reading what the admissions loaded from the global pool
    for (engine::SchedSequence* s : plan.admitted) {
      Request& q = requests_[static_cast<size_t>(inst.request_of.at(s->id))];
      if (o_.global_pool_gbps > 0) {
        load_s += static_cast<double>(s->admitted_tier[0] * o_.kv_bytes_per_token) / (o_.global_pool_gbps * 1e9);
      }
      if (!q.hit_recorded) {  // the first admission's prefix hit
        q.hit_recorded = true;
        res_.hit_tokens += s->admitted_cached;
        res_.global_hit_tokens += s->admitted_cached - s->admitted_pool;
        inst.stats.hit_tokens += s->admitted_cached;
      }
    }
    std::vector<engine::SchedSeqId> refused;
    for (engine::SchedSequence* s : plan.refused) refused.push_back(s->id);
    inst.step.assign(plan.scheduled.begin(), plan.scheduled.end());
    int64_t prefill = 0, decoding = 0;
    for (const engine::ScheduledSeq& e : inst.step) {
      const Request& q = requests_[static_cast<size_t>(inst.request_of.at(e.seq->id))];
      if (e.begin >= q.prompt) {
        ++decoding;
      } else {
        prefill += e.n_tokens;
      }
    }
    for (engine::SchedSeqId id : refused) {
      end_request(inst, requests_[static_cast<size_t>(inst.request_of.at(id))], /*finished=*/false);
    }
    if (inst.step.empty()) return;  // nothing runs: arrivals (or nothing) wake it
    const double s = o_.cost.step_seconds(prefill, decoding) + load_s;
    inst.step_cost.observe(plan_tokens, static_cast<int64_t>(s * 1e9));
    inst.busy = true;
    inst.busy_until = now_ + s;
    inst.stats.busy_s += s;
    ++inst.stats.steps;
  }

  void finish_step(Instance& inst) {
    for (const engine::ScheduledSeq& e : inst.step) {  // what Engine::step does, minus the forward pass
      inst.copies.clear();
      inst.slots.resize(static_cast<size_t>(e.n_tokens));
      const bool ok = inst.bm.append(
          e.seq->kv, std::span<const int32_t>(e.seq->tokens).subspan(static_cast<size_t>(e.begin), static_cast<size_t>(e.n_tokens)),
          inst.slots, inst.copies);
      CHECK(ok) << "the scheduler planned blocks that did not fit";
      inst.bm.commit(e.seq->kv);
    }
    for (const engine::ScheduledSeq& e : inst.step) {
      if (!e.completes()) continue;
      const int64_t r = inst.request_of.at(e.seq->id);
      Request& q = requests_[static_cast<size_t>(r)];
      if (q.first_token_s < 0) {
        q.first_token_s = now_;
        inst.load.pending_prefill_tokens -= q.pending_prefill;
        ttft_.push_back(now_ - q.arrival_s);
      } else {
        tbt_.push_back(now_ - q.last_token_s);
        q.tbt_sum_s += now_ - q.last_token_s;
      }
      q.last_token_s = now_;
      last_token_s_ = std::max(last_token_s_, now_);
      if (++q.generated >= q.outputs) {
        end_request(inst, q, /*finished=*/true);
      } else if (pd_ && !inst.stats.decode) {
        hand_off(inst, q, r);
      } else {
        e.seq->tokens.push_back(detail::generated_token(r, q.generated, o_.trace.vocab_size));
      }
    }
    inst.step.clear();
    if (!inst.arrived.empty()) adopt_arrived(inst);  // blocks freed: waiting transfers may fit now
  }

  // P/D: the prompt's KV leaves the prefill instance for the least-loaded decode instance; only
  // what that instance's cache lacks moves.
  void hand_off(Instance& prefill, Request& q, int64_t r) {
    leave(prefill, q);
    std::vector<router::WorkerLoad> loads;
    for (size_t i = static_cast<size_t>(o_.prefill_instances); i < instances_.size(); ++i) {
      router::WorkerLoad w = instances_[i]->load;
      w.available = true;
      loads.push_back(w);
    }
    const router::Choice choice = router::choose_worker(router::RoutingPolicy::kLeastLoad, loads,
                                                        router::RequestCost{0, q.blocks, o_.block_size}, 0, rr_cursor_++);
    CHECK(choice.worker >= 0) << "every decode instance is available";
    q.instance = o_.prefill_instances + choice.worker;
    Instance& d = *instances_[static_cast<size_t>(q.instance)];
    std::vector<int32_t>& prompt = q.handoff;  // kept for the adoption
    synthesize_prompt(trace_[static_cast<size_t>(r)], o_.trace, prompt);
    const int64_t held = d.bm.plan(prompt, kvcache::KvNamespace{}).num_cached_tokens;
    const int64_t bytes = (q.prompt - held) * o_.kv_bytes_per_token;
    ++res_.transfers;
    res_.transfer_bytes += bytes;
    res_.decode_hit_tokens += held;
    d.load.active_blocks += q.blocks;
    ++d.load.in_flight;
    ++d.stats.requests;
    d.stats.prompt_tokens += q.prompt;
    d.stats.hit_tokens += held;
    transfers_.push({now_ + (o_.transfer_gbps > 0 ? static_cast<double>(bytes) / (o_.transfer_gbps * 1e9) : 0.0), r});
  }

  // P/D decode side: arrived prompts whose blocks fit become adopted KV of new sequences, in
  // arrival order; the first that does not fit waits (refused if it could never fit).
  void adopt_arrived(Instance& d) {
    while (!d.arrived.empty()) {
      const int64_t r = d.arrived.front();
      Request& q = requests_[static_cast<size_t>(r)];
      std::vector<int32_t>& tokens = q.handoff;  // the hand-off's synthesis
      kvcache::PrefixMatch hit = d.bm.match_prefix(tokens, kvcache::KvNamespace{});
      if (d.bm.plan(hit, q.prompt).num_new_blocks > d.bm.num_available_blocks()) {
        if (!d.sched.empty()) return;  // running sequences will free blocks
        d.arrived.erase(d.arrived.begin());
        d.load.active_blocks -= q.blocks;
        --d.load.in_flight;
        q.done = true;
        q.handoff = {};
        ++res_.rejected;
        continue;
      }
      d.arrived.erase(d.arrived.begin());
      const kvcache::SeqId seq = d.bm.add_sequence(q.prompt + q.outputs);
      const int64_t have = hit.num_tokens();
      if (!hit.empty()) d.bm.adopt(seq, std::move(hit));
      d.slots.resize(static_cast<size_t>(q.prompt - have));
      d.copies.clear();
      CHECK(d.bm.append(seq, std::span<const int32_t>(tokens).subspan(static_cast<size_t>(have)), d.slots, d.copies));
      d.bm.commit(seq);
      tokens.push_back(detail::generated_token(r, q.generated, o_.trace.vocab_size));
      engine::SeqKey key;
      key.arrival = static_cast<uint64_t>(r);
      engine::SchedSequence& s = d.sched.add(key, std::exchange(q.handoff, {}), q.prompt + q.outputs, 1,
                                             kvcache::KvNamespace{}, {}, seq);
      q.id = s.id;
      d.request_of[s.id] = r;
    }
  }

  Result<ClusterReplayResult> finish() {
    int64_t met = 0;
    for (Request& q : requests_) {
      if (!q.done && q.instance >= 0) ++res_.rejected;  // stranded: nothing ever woke its instance
      if (!q.done || q.first_token_s < 0) continue;
      const double ttft = q.first_token_s - q.arrival_s;
      const double tbt = q.generated > 1 ? q.tbt_sum_s / static_cast<double>(q.generated - 1) : 0;
      const bool ok_ttft = o_.ttft_slo_s <= 0 || ttft <= o_.ttft_slo_s;
      const bool ok_tbt = o_.tbt_slo_s <= 0 || tbt <= o_.tbt_slo_s;
      if (ok_ttft && ok_tbt && q.generated >= q.outputs) ++met;
    }
    res_.slo_attainment = res_.finished > 0 ? static_cast<double>(met) / static_cast<double>(res_.finished) : 0;
    res_.hit_rate = res_.prompt_tokens > 0 ? static_cast<double>(res_.hit_tokens) / static_cast<double>(res_.prompt_tokens) : 0;
    res_.ttft_s = detail::percentiles(ttft_);
    res_.tbt_s = detail::percentiles(tbt_);
    const double first = trace_.empty() ? 0 : trace_.front().timestamp_ms * 1e-3 * o_.time_scale;
    res_.makespan_s = std::max(0.0, last_token_s_ - first);
    for (size_t i = 0; i < instances_.size(); ++i) res_.per_instance[i] = instances_[i]->stats;
    return res_;
  }

  const std::vector<TraceRequest>& trace_;
  const ClusterReplayOptions& o_;
  ManualClock clock_;                   // the tiers' completion stamps (unused by the results)
  const Logger quiet_{LogLevel::kSilent};
  std::unique_ptr<SharedPool> shared_;  // outlives the instances' clients
  std::vector<std::unique_ptr<Instance>> instances_;
  std::vector<Request> requests_;
  std::vector<double> ttft_, tbt_;
  ClusterReplayResult res_;
  double now_ = 0;
  double last_token_s_ = 0;
  uint64_t rr_cursor_ = 0;
  bool pd_ = false;
  // P/D transfers in flight: (arrival time at the decode instance, request), earliest first.
  std::priority_queue<std::pair<double, int64_t>, std::vector<std::pair<double, int64_t>>, std::greater<>> transfers_;
};

}  // namespace

Result<ClusterReplayResult> replay_cluster(const std::vector<TraceRequest>& trace, const ClusterReplayOptions& o) {
  if (o.prefill_instances > 0 || o.decode_instances > 0) {
    if (o.prefill_instances < 1 || o.decode_instances < 1 || o.prefill_instances + o.decode_instances > 100000) {
      return Status::invalid_argument("a P/D split needs 1 or more prefill and decode instances (at most 100000 in all)");
    }
    if (!(o.transfer_gbps >= 0) || !std::isfinite(o.transfer_gbps)) return Status::invalid_argument("transfer bandwidth must be >= 0");
  } else if (o.instances < 1 || o.instances > 100000) {
    return Status::invalid_argument("instances must be in [1, 100000]");
  }
  if (o.block_size <= 0 || o.block_size > 4096) return Status::invalid_argument("block size must be in [1, 4096]");
  if (o.capacity_tokens < o.block_size) {
    return Status::invalid_argument("each instance needs a cache of at least one block (--capacity-tokens)");
  }
  if (!(o.time_scale > 0) || !std::isfinite(o.time_scale)) return Status::invalid_argument("time scale must be > 0");
  if (!(o.cost.prefill_tps > 0) || !(o.cost.decode_tps > 0) || !(o.cost.decode_batch_cost >= 0)) {
    return Status::invalid_argument("the step-cost profile needs prefill and decode tokens/s > 0");
  }
  if (o.max_num_seqs < 1 || o.max_num_batched_tokens < 1 || o.max_num_seqs > o.max_num_batched_tokens) {
    return Status::invalid_argument("max_num_seqs must be in [1, max_num_batched_tokens]");
  }
  if (o.ttft_slo_s < 0 || o.tbt_slo_s < 0) return Status::invalid_argument("negative SLO");
  if (!(o.step_budget_ms >= 0 && o.step_budget_ms <= 3.6e6)) return Status::invalid_argument("step budget must be in [0, 3600000] ms");
  if (o.global_pool_tokens < 0 || o.global_pool_gbps < 0 || o.kv_bytes_per_token < 0) {
    return Status::invalid_argument("negative global pool size, bandwidth or KV bytes per token");
  }
  if (o.global_pool_tokens > 0 && o.global_pool_tokens < o.block_size) {
    return Status::invalid_argument("the global pool holds no block");
  }
  Cluster cluster(trace, o);
  return cluster.run();
}

}  // namespace pagoda::sim
