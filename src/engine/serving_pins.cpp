// ServingEngine's CachePinner (engine/pinning.h): a pin is a request whose prompt is computed
// like a completion's and, instead of sampling, has its full blocks pinned (kvcache/cache_pins.h)
// on the loop thread in the step that wrote its KV, before its sequence lets go of them.
#include <cmath>
#include <condition_variable>
#include <mutex>

#include "engine/serving_engine.h"

namespace pagoda::engine {

// What a pin's request carries from pin() to complete_pin() and on to its observer.
struct ServingEngineImpl::PinJob {
  PinRequest req;
  std::shared_ptr<PinObserver> observer;
  Status status;  // set by complete_pin
  PinInfo info;
};

namespace {

// The request observer of a pin's prefill: no tokens, one on_pinned at the end.
class PinRequestObserver final : public RequestObserver {
 public:
  using Job = std::shared_ptr<void>;
  PinRequestObserver(std::shared_ptr<PinObserver> observer, const Status* status, const PinInfo* info, Job job)
      : observer_(std::move(observer)), status_(status), info_(info), job_(std::move(job)) {}
  void on_tokens(std::span<const TokenEvent>) override {}
  void on_choice_end(const ChoiceEnd&) override {}
  void on_finish(const Status& status, const RequestUsage&) override {
    if (!status.is_ok()) return observer_->on_pinned(status, PinInfo{});
    observer_->on_pinned(*status_, *info_);
  }

 private:
  std::shared_ptr<PinObserver> observer_;
  const Status* status_;  // in job_, which this keeps alive
  const PinInfo* info_;
  Job job_;
};

int64_t ttl_ns_of(double ttl_s) { return static_cast<int64_t>(std::llround(ttl_s * 1e9)); }

}  // namespace

Status ServingEngineImpl::pin(PinRequest request, std::shared_ptr<PinObserver> observer) {
  if (observer == nullptr) return Status::invalid_argument("no observer");
  if (!engine_->config().enable_prefix_caching) {
    return Status::invalid_argument("pinning needs the prefix cache, which is off (--no-prefix-cache)");
  }
  if (pins_.max_pinned_blocks() == 0) return Status::invalid_argument("pinning is off (--max-pinned-share 0)");
  if (!(request.ttl_s >= 0 && request.ttl_s <= 10.0 * 365 * 86400)) {
    return Status::invalid_argument("ttl_seconds must be in [0, 315360000] (0: until unpinned)");
  }
  CompletionRequest r;
  r.prompt = request.prompt;
  r.max_tokens = 1;  // computed, never sampled (complete_pin)
  r.cache_salt = request.cache_salt;
  r.priority = request.priority;
  r.kv_select = kvcache::KvSelectParams{};  // a pin is computed with the full cache (a default --kv-select aside)
  int64_t max_tokens = 0;
  PAGODA_RETURN_IF_ERROR(validate(r, &max_tokens));  // ids, context, pool: as a completion's
  const int64_t bs = engine_->kv_layout().block_size;
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  if (n_prompt < bs) {
    return Status::invalid_argument("the prompt has " + std::to_string(n_prompt) +
                                    " tokens; only full KV blocks are cached, so a pin needs at least " +
                                    std::to_string(bs));
  }
  if (n_prompt / bs > pins_.max_pinned_blocks()) {
    return Status::resource_exhausted("the prompt has " + std::to_string(n_prompt / bs) + " full KV blocks, more than the " +
                                      std::to_string(pins_.max_pinned_blocks()) +
                                      " that pins may hold (raise --max-pinned-share)");
  }
  auto job = std::make_shared<PinJob>();
  job->req = std::move(request);
  job->observer = std::move(observer);
  auto adapter = std::make_shared<PinRequestObserver>(job->observer, &job->status, &job->info, job);
  auto id = enqueue(std::move(r), std::move(adapter), job);
  return id.is_ok() ? Status::ok() : id.status();
}

PinInfo ServingEngineImpl::pin_info(const kvcache::CachePin& p, int64_t now) const {
  const kvcache::BlockManager& bm = engine_->block_manager();
  PinInfo info;
  info.id = p.id;
  info.prompt_tokens = static_cast<int64_t>(p.tokens.size());
  info.pinned_tokens = p.match.num_tokens();
  info.blocks.assign(p.match.blocks().begin(), p.match.blocks().end());
  info.cache_salt = p.cache_salt;
  info.client_salt = p.client_salt;
  info.owner = p.owner;
  info.label = p.label;
  info.ttl_s = static_cast<double>(p.ttl_ns) / 1e9;  // division: 30 s reads back as 30, not 30.000000000000004
  info.age_s = static_cast<double>(now - p.created_ns) / 1e9;
  info.expires_in_s = p.ttl_ns > 0 ? static_cast<double>(p.expires_ns() - now) / 1e9 : -1;
  if (!info.blocks.empty()) info.last_block_hash = bm.index().hash(info.blocks.back());
  return info;
}

void ServingEngineImpl::complete_pin(Request& r) {
  PinJob& job = *r.pin;
  const SchedSequence& seq = scheduler_.get(r.choices[0].seq);
  kvcache::CachePinSpec spec;
  spec.tokens = job.req.prompt;
  spec.ns = seq.ns;
  spec.cache_salt = job.req.cache_salt;
  spec.client_salt = job.req.client_salt;
  spec.owner = job.req.owner;
  spec.label = job.req.label;
  spec.ttl_ns = ttl_ns_of(job.req.ttl_s);
  const int64_t now = clock_->now_ns();
  bool refreshed = false;
  auto pinned = pins_.pin(spec, now, &refreshed);  // the sequence still holds the blocks
  if (pinned.is_ok()) {
    job.info = pin_info(**pinned, now);
    job.info.refreshed = refreshed;
  } else {
    job.status = pinned.status();
  }
  r.num_open = 0;
  finish_request(r, Status::ok());  // r is gone; its blocks stay cached, pinned
}

void ServingEngineImpl::expire_pins() { pins_.expire(clock_->now_ns()); }

void ServingEngineImpl::refuse_unfittable(const StepPlan& plan) {
  for (const SchedSequence* s : plan.refused) {
    auto owner = owners_.find(s->id);
    if (owner == owners_.end()) continue;  // its request already ended
    const int64_t bs = engine_->kv_layout().block_size;
    finish_request(*owner->second.request,
                   Status::too_large("the request needs " + std::to_string(s->tokens.size()) +
                                     " KV tokens, more than the KV cache holds beside the " +
                                     std::to_string(pins_.num_pinned_blocks() * bs) +
                                     " tokens pinned since it was queued (unpin some: DELETE /v1/cache/pin)"));
  }
}

Result<PinInfo> ServingEngineImpl::unpin(int64_t id) {
  Result<PinInfo> out = Status::not_found("no pin with id " + std::to_string(id));
  run_on_loop([&] {
    const int64_t now = clock_->now_ns();
    expire_pins();
    if (const kvcache::CachePin* p = pins_.find(id); p != nullptr) {
      out = pin_info(*p, now);
      pins_.unpin(id);
      publish_metrics();
    }
  });
  return out;
}

Result<PinInfo> ServingEngineImpl::unpin(const std::vector<int32_t>& prompt, const std::string& cache_salt) {
  Result<PinInfo> out = Status::not_found("no pin of that prompt (" + std::to_string(prompt.size()) +
                                          " tokens) under that cache_salt");
  run_on_loop([&] {
    const int64_t now = clock_->now_ns();
    expire_pins();
    if (const kvcache::CachePin* p = pins_.find(prompt, engine_->kv_namespace(cache_salt)); p != nullptr) {
      out = pin_info(*p, now);
      pins_.unpin(p->id);
      publish_metrics();
    }
  });
  return out;
}

std::vector<PinInfo> ServingEngineImpl::pins() {
  std::vector<PinInfo> out;
  run_on_loop([&] {
    const int64_t now = clock_->now_ns();
    expire_pins();
    for (const auto& p : pins_.pins()) out.push_back(pin_info(*p, now));
    publish_metrics();
  });
  return out;
}

PinStats ServingEngineImpl::pin_stats() {
  PinStats out;
  run_on_loop([&] {
    expire_pins();
    out.pins = pins_.num_pins();
    out.pinned_blocks = pins_.num_pinned_blocks();
    out.max_pinned_blocks = pins_.max_pinned_blocks();
    out.expired = pins_.num_expired();
  });
  return out;
}

Result<PinInfo> pin_and_wait(CachePinner& pinner, PinRequest request) {
  struct Waiter final : PinObserver {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    Status status;
    PinInfo info;
    void on_pinned(const Status& s, const PinInfo& p) override {
      {
        std::lock_guard<std::mutex> lock(mutex);
        status = s;
        info = p;
        done = true;
      }
      done_cv.notify_all();
    }
  };
  auto waiter = std::make_shared<Waiter>();
  PAGODA_RETURN_IF_ERROR(pinner.pin(std::move(request), waiter));
  std::unique_lock<std::mutex> lock(waiter->mutex);
  waiter->done_cv.wait(lock, [&] { return waiter->done; });
  if (!waiter->status.is_ok()) return waiter->status;
  return waiter->info;
}

}  // namespace pagoda::engine
