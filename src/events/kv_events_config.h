// KvEventsConfig: `--kv-events-config '<json>'`, with vLLM's keys and defaults
// (vllm/config/kv_events.py), so the same JSON configures vLLM, SGLang and Pagoda:
//   enable_kv_cache_events  false
//   publisher               "zmq" when enabled, else "null" (no events)
//   endpoint                "tcp://*:5557"   the PUB socket (bind or connect: endpoint_binds)
//   replay_endpoint         null             the ROUTER socket answering replay requests
//   buffer_steps            10000            batches kept for replay
//   hwm                     100000           the PUB socket's high-water mark (beyond: dropped)
//   max_queue_size          100000           events queued for the publisher thread (beyond:
//                                            dropped, and a sequence number is skipped so
//                                            subscribers see the loss as a gap)
//   topic                   ""               the first frame of every message
// Pagoda's own key: "encoding": "map" (default: current vLLM, events as maps tagged "type") or
// "array" (the legacy tag-first arrays, for older consumers). Unknown keys are an error (as in
// vLLM), so a typo never silently disables events.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace pagoda::events {

enum class EventEncoding { kMap, kArray };

struct KvEventsConfig {
  bool enable_kv_cache_events = false;
  std::string publisher;                // resolved by parse: "zmq" or "null"
  std::string endpoint = "tcp://*:5557";
  std::string replay_endpoint;          // "" = none (vLLM's null)
  int64_t buffer_steps = 10000;
  int64_t hwm = 100000;
  int64_t max_queue_size = 100000;
  std::string topic;
  EventEncoding encoding = EventEncoding::kMap;
  int32_t data_parallel_rank = 0;       // the batch's third element; ports += rank

  bool publishes() const { return enable_kv_cache_events && publisher == "zmq"; }
};

// Errors (invalid_argument) name the key: not JSON, not an object, an unknown key, a wrong type,
// a value out of range, an unknown publisher or encoding, an endpoint without a transport.
Result<KvEventsConfig> parse_kv_events_config(std::string_view json);

// vLLM's rule, "bind stable, connect volatile": a socket binds when its endpoint has a wildcard
// host ("*", "::") or is ipc:// or inproc://, and connects otherwise (so N engines can connect
// to one indexer that binds).
bool endpoint_binds(std::string_view endpoint);

// Data parallel ranks publish separately: tcp ports += rank, inproc/ipc names get "_dp<rank>".
std::string offset_endpoint(std::string_view endpoint, int32_t rank);

}  // namespace pagoda::events
