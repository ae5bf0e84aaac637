// Helpers for the events tests: a raw subscriber, a replay client, batches, bounded waits.
#pragma once

#include <zmq.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "events/event_codec.h"
#include "events/zmq_socket.h"
#include "eventually.h"

namespace pagoda::events::testing {

struct Message {
  std::string topic;
  int64_t seq = -2;
  std::string payload;
};

// Waits for one message on `socket` up to timeout_ms; false when none came.
inline bool receive_within(ZmqSocket& socket, std::vector<std::string>& frames, int timeout_ms) {
  zmq_pollitem_t item = {socket.get(), 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, timeout_ms) <= 0) return false;
  return socket.receive(frames, false);
}

inline bool next_message(ZmqSocket& sub, Message& m, int timeout_ms) {
  std::vector<std::string> frames;
  if (!receive_within(sub, frames, timeout_ms) || frames.size() != 3) return false;
  m.topic = frames[0];
  if (!decode_seq(frames[1], m.seq)) return false;
  m.payload = frames[2];
  return true;
}

// Sends a replay request (REQ envelope) and collects the replies up to the end marker.
inline bool replay_from(ZmqSocket& dealer, int64_t start, std::vector<Message>& out, int timeout_ms = 5000) {
  out.clear();
  if (!dealer.send({"", encode_seq(start)})) return false;
  std::vector<std::string> frames;
  while (receive_within(dealer, frames, timeout_ms)) {
    if (frames.size() != 3 || !frames[0].empty()) return false;
    Message m;
    if (!decode_seq(frames[1], m.seq)) return false;
    if (m.seq == -1) return frames[2].empty();
    m.payload = frames[2];
    out.push_back(std::move(m));
  }
  return false;
}

using pagoda::testing::eventually;

// One batch storing block `hash` on the GPU, encoded.
inline std::string batch_storing(uint64_t hash) {
  KvEventBatch b;
  b.ts = 1;
  KvEvent e;
  e.type = KvEventType::kBlockStored;
  e.block_hashes = {hash};
  e.medium = "GPU";
  b.events = {e};
  return encode_batch(b, EventEncoding::kMap);
}

}  // namespace pagoda::events::testing
