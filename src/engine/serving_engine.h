// ServingEngineImpl: the ServingEngine of engine/serving.h (include that one, not this).
//
// Threads: submit/abort/shutdown/metrics take mutex_ and touch only the inbox, the abort list,
// the flags and the published metrics. Everything else (requests_, the scheduler, the engine)
// belongs to the loop: the loop thread after start(), the caller of step() before.
//
// One step (serving_step.cpp):
//   1. drain the inbox (new requests become waiting scheduler sequences) and the aborts
//      (their sequences are removed, blocks freed, on_finish(kAborted));
//   2. Scheduler::schedule() (admission, preemption, chunk sizes);
//   3. one Engine::step over every scheduled sequence's tokens (a ragged batch);
//   4. every sequence whose step reached the end of its tokens samples: a request's prompt
//      sequence first forks into its n choices (sharing blocks), each choice draws with its own
//      Sampler (seed + i) from its copy of the logits, its text goes through a TextStream
//      (stop strings), and the token is appended (decode next step) or the choice ends
//      (its sequence removed at once);
//   5. observers get each touched request's events (on_tokens, on_choice_end, on_finish);
//   6. metrics are published.
// A preempted choice keeps its tokens and Sampler (RNG state) in place, so after it is
// re-admitted (prefix cache hit or recompute) it continues exactly as if never interrupted.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <functional>

#include "engine/introspection.h"
#include "engine/kv_history.h"
#include "engine/pinning.h"
#include "kvcache/cache_pins.h"
#include "engine/scheduler.h"
#include "engine/serving.h"
#include "engine/step_cost.h"
#include "engine/text_stream.h"

namespace pagoda::engine {

class ServingEngineImpl final : public ServingEngine, public KvIntrospector, public CachePinner {
 public:
  ServingEngineImpl(std::unique_ptr<Engine> engine, std::shared_ptr<const model::Tokenizer> tokenizer,
                    const ServingConfig& config);
  ~ServingEngineImpl() override;

  Result<RequestId> submit(CompletionRequest request, std::shared_ptr<RequestObserver> observer) override;
  void abort(RequestId id) override;
  void start() override;
  void shutdown(bool drain) override;
  bool step() override;
  ServingMetrics metrics() const override;
  const Engine& engine() const override { return *engine_; }
  const model::Tokenizer& tokenizer() const override { return *tokenizer_; }
  void check_integrity() override;
  KvIntrospector* introspector() override { return this; }
  void with_block_manager(const std::function<void(kvcache::BlockManager&)>& fn) override {
    run_on_loop([&] { fn(engine_->block_manager()); });
  }
  void with_parked(RequestId id, const std::function<void(kvcache::BlockManager&, kvcache::SeqId)>& fn) override;
  // KvIntrospector (serving_introspection.cpp), each run through run_on_loop.
  KvSnapshot snapshot(const SnapshotOptions& options) override;
  Result<RequestKv> request_kv(RequestId id) override;
  Result<KvExplanation> explain(const ExplainRequest& request) override;
  // CachePinner (serving_pins.cpp).
  CachePinner* pinner() override { return this; }
  Status pin(PinRequest request, std::shared_ptr<PinObserver> observer) override;
  Result<PinInfo> unpin(int64_t id) override;
  Result<PinInfo> unpin(const std::vector<int32_t>& prompt, const std::string& cache_salt) override;
  std::vector<PinInfo> pins() override;
  PinStats pin_stats() override;

 private:
  struct Choice {
    Choice(int i, const SamplingParams& params, int64_t n_vocab) : index(i), sampler(params, n_vocab) {}
    int index = 0;
    SchedSeqId seq = -1;          // -1 before the fork (index > 0) and after the end
    Sampler sampler;              // its RNG state survives preemption
    std::unique_ptr<TokenConstraint> constraint;  // a clone of the request's, if any
    std::optional<TextStream> text;
    int64_t num_generated = 0;
    int64_t last_token_ns = 0;
    bool done = false;
  };
  struct PinJob;  // a pin's prefill (serving_pins.cpp)
  struct Request {
    RequestId id = 0;
    CompletionRequest req;
    std::shared_ptr<RequestObserver> observer;
    int64_t max_tokens = 0;       // per choice, clipped to the context and the pool
    int64_t submit_ns = 0;
    bool forked = false;          // the n choices exist (after the first sample)
    bool scheduled_once = false;
    bool got_token = false;
    int num_open = 0;             // choices not yet ended
    std::vector<Choice> choices;  // [n]
    RequestUsage usage;
    // Delivered at the end of the step.
    std::vector<TokenEvent> events;
    std::vector<ChoiceEnd> ends;
    bool touched = false;
    std::shared_ptr<PinJob> pin;  // a pin's prefill: pinned instead of sampled
  };
  struct Submitted {
    RequestId id;
    CompletionRequest req;
    std::shared_ptr<RequestObserver> observer;
    int64_t max_tokens;
    int64_t submit_ns;
    std::shared_ptr<PinJob> pin;
  };
  struct Owner {
    Request* request;
    int choice;
  };

  // *select (when non-null): the request's selection, resolved against the default and normalized.
  Status validate(const CompletionRequest& r, int64_t* max_tokens, kvcache::KvSelectParams* select = nullptr) const;
  Result<RequestId> enqueue(CompletionRequest request, std::shared_ptr<RequestObserver> observer,
                            std::shared_ptr<PinJob> pin);
  void complete_pin(Request& r);   // its prompt is computed: pin it, end the request
  void expire_pins();
  PinInfo pin_info(const kvcache::CachePin& p, int64_t now) const;
  void refuse_unfittable(const StepPlan& plan);  // ends what can never fit beside the pins
  void run_loop();
  // The step (serving_step.cpp). Returns false when there was nothing to do.
  bool step_locked_out();
  void drain_inbox(bool* abort_all);
  void admit_new(Submitted& s);
  void sample_choice(Request& r, Choice& c, const float* logits, int64_t now);
  void end_choice(Request& r, Choice& c, FinishReason reason);
  void finish_request(Request& r, const Status& status);  // delivers; erases r
  void deliver(Request& r);
  void set_cached_usage(Request& r, const SchedSequence& s);  // cached_tokens (+ per tier)
  void note_loaded_blocks(const SchedSequence& s);  // Engine::note_loaded for a finished load
  // Debug level (-v): one line per step with the scheduler's decisions (allocates: debug only).
  void log_step_plan(const StepPlan& plan) const;
  void fork_choices(Request& r);
  void publish_metrics();
  void run_integrity_checks();  // on the loop thread, between steps
  void check_kv_integrity();    // the block manager's and the tier stack's
  // Runs fn on the loop thread between two steps and waits for it (directly when no loop runs).
  void run_on_loop(const std::function<void()>& fn);
  void run_loop_tasks();        // on the loop thread, between steps
  RequestSnapshot request_snapshot(const Request& r, int64_t now);
  SequenceKv sequence_kv(const SchedSequence& seq);  // its block table with states and tiers

  // CompletionRequest::park_kv: the kept sequences of ended requests (loop thread).
  std::unordered_map<RequestId, kvcache::SeqId> parked_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<const model::Tokenizer> tokenizer_;
  ServingConfig config_;          // clipped to the engine
  const Clock* clock_;
  int64_t n_vocab_ = 0;
  int64_t pool_tokens_ = 0;       // the whole KV pool, in tokens
  // Step time per token count, fitted to every step (before scheduler_, which reads it). The
  // prior (5 ms + 1 ms per token) holds until the first steps are measured.
  static constexpr double kStepCostPriorFixedNs = 5e6, kStepCostPriorPerTokenNs = 1e6;
  StepCostModel step_cost_;
  Scheduler scheduler_;

  // Loop state.
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::unordered_map<SchedSeqId, Owner> owners_;
  std::vector<Engine::StepSeq> step_seqs_;  // [max_num_seqs]
  std::vector<float> logits_;               // [max_num_seqs, n_vocab] rows of completing sequences
  std::vector<float> row_;                  // [n_vocab] a choice's copy (penalties edit it)
  std::vector<int32_t> index_scratch_;      // [n_vocab]
  TokenLogprobs logprobs_;
  std::vector<Request*> touched_;           // requests with events this step
  std::vector<Submitted> inbox_local_;
  std::vector<RequestId> aborts_local_;
  ServingMetrics loop_metrics_;
  KvHistory history_;             // listens to the block manager (evictions, namespaces, ticks)
  kvcache::CachePins pins_;       // pinned prefixes (declared after engine_: released before it)
  std::atomic<int64_t> pinned_blocks_{0};  // pins_.num_pinned_blocks() for submitters
  int64_t start_ns_ = 0;

  // Shared with submitters, under mutex_.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Submitted> inbox_;
  std::vector<RequestId> aborts_;
  RequestId next_id_ = 1;
  int64_t num_waiting_ = 0;       // waiting requests in the scheduler at the last publish
  bool accepting_ = true;
  bool stopping_ = false;
  bool abort_all_ = false;
  bool started_ = false;
  bool loop_running_ = false;
  int64_t integrity_requests_ = 0, integrity_done_ = 0;  // check_integrity() hand-off
  std::condition_variable integrity_checked_;
  std::vector<const std::function<void()>*> loop_tasks_;  // run_on_loop hand-off
  int64_t loop_tasks_queued_ = 0, loop_tasks_done_ = 0;
  std::condition_variable loop_tasks_ran_;
  ServingMetrics published_;
  std::thread loop_;
};

}  // namespace pagoda::engine
