// KV cache of layer groups (kvcache/kv_coordinator.h) against the same layers kept whole
// ("every layer full": what a cache without groups must do), through the real coordinator:
//   1. capacity: KV bytes per token and how many 8k-token sequences one pool holds (each
//      prefilled in 512-token chunks with a commit after each, distinct tokens, until the next
//      chunk does not fit);
//   2. multi-turn chat: C conversations (8, 16, 32) take turns round-robin (user U tokens, reply R
//      tokens; the prompt is the whole history), each turn matched, prefilled, decoded and
//      freed; the prefix hit rate over all prompt tokens. Pagoda's engine before groups ran a
//      sliding-window model uncached (hit rate 0 by construction).
// Shapes (f16 KV, block 16): Gemma-3-12B (48 layers, every 6th global, window 1024, 8 kv heads x
// 256) and a Gemma-4-31B-like one (60 layers, every 6th global; sliding 16 x 256, global 4 x
// 512, window 1024; our assumption of its layout, not a published file).
//   build/bin/kv_groups_bench [pool GiB = 16]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kvcache/kv_coordinator.h"

using namespace pagoda::kvcache;
using pagoda::kernels::KvDType;

namespace {

constexpr int64_t kBlock = 16;

struct Shape {
  std::string name;
  int64_t n_layer, window;
  KvLayerSpec sliding, global;
};

KvCacheSpec spec_of(const Shape& s) {
  std::vector<KvLayerSpec> layers;
  for (int64_t i = 0; i < s.n_layer; ++i) layers.push_back((i + 1) % 6 == 0 ? s.global : s.sliding);
  return *make_kv_cache_spec(kBlock, layers);
}

int32_t g_next_token = 1;
std::vector<int32_t> fresh(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = g_next_token++;
  return t;
}

struct Capacity {
  int64_t sequences = 0;
  double bytes_per_token = 0;
};

Capacity capacity(const KvCacheSpec& spec, int64_t pool_bytes, int64_t context) {
  const KvPageLayout layout = *plan_page_layout(spec);
  KvCoordinator kv(spec, layout, pool_bytes / layout.page_bytes);
  const KvNamespace ns{1, 2, 3};
  Capacity c;
  std::vector<KvGroupCopy> copies;
  for (bool full = false; !full;) {
    const KvSeqId s = kv.add_sequence(context, ns);
    for (int64_t done = 0; done < context; done += 512) {
      const std::vector<int32_t> chunk = fresh(std::min<int64_t>(512, context - done));
      if (!kv.append(s, chunk, copies)) {
        full = true;
        break;
      }
      kv.commit(s);
    }
    if (!full) ++c.sequences;
  }
  c.bytes_per_token = static_cast<double>(spec.bytes_per_sequence(context)) / static_cast<double>(context);
  return c;
}

double multi_turn(const KvCacheSpec& spec, int64_t pool_bytes, int64_t conversations, int64_t turns, int64_t user,
                  int64_t reply) {
  const KvPageLayout layout = *plan_page_layout(spec);
  KvCoordinator kv(spec, layout, pool_bytes / layout.page_bytes);
  const KvNamespace ns{1, 2, 3};
  std::vector<std::vector<int32_t>> history(static_cast<size_t>(conversations));
  std::vector<KvGroupCopy> copies;
  int64_t prompt_tokens = 0, hit_tokens = 0;
  for (int64_t turn = 0; turn < turns; ++turn) {
    for (auto& h : history) {
      const std::vector<int32_t> u = fresh(user);
      h.insert(h.end(), u.begin(), u.end());
      KvGroupMatch m = kv.match_prefix(h, ns);
      prompt_tokens += static_cast<int64_t>(h.size());
      hit_tokens += m.num_tokens();
      if (!kv.plan(m, static_cast<int64_t>(h.size()) + reply).fits()) {
        std::fprintf(stderr, "a conversation of %zu tokens does not fit the pool\n", h.size());
        std::exit(1);
      }
      const KvSeqId s = kv.add_sequence(static_cast<int64_t>(h.size()) + reply, ns);
      const int64_t n_hit = m.num_tokens();
      kv.adopt(s, std::move(m));
      if (!kv.append(s, std::span<const int32_t>(h).subspan(static_cast<size_t>(n_hit)), copies)) std::exit(1);
      kv.commit(s);
      const std::vector<int32_t> r = fresh(reply);
      for (int32_t t : r) {  // decode: one token per step
        if (!kv.append(s, std::span<const int32_t>(&t, 1), copies)) std::exit(1);
        kv.commit(s);
      }
      h.insert(h.end(), r.begin(), r.end());
      kv.free_sequence(s);
    }
  }
  return static_cast<double>(hit_tokens) / static_cast<double>(prompt_tokens);
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 16.0;
  const int64_t pool = static_cast<int64_t>(gib * 1024 * 1024 * 1024);
  const std::vector<Shape> shapes = {
      {"gemma-3-12b", 48, 1024, {KvGroupKind::kSliding, 1024, 8, 256, KvDType::kF16, -1}, {KvGroupKind::kFull, 0, 8, 256, KvDType::kF16, -1}},
      {"gemma-4-31b-like", 60, 1024, {KvGroupKind::kSliding, 1024, 16, 256, KvDType::kF16, -1}, {KvGroupKind::kFull, 0, 4, 512, KvDType::kF16, -1}},
  };
  std::printf("pool %.1f GiB, f16 KV, block %lld\n\n", gib, static_cast<long long>(kBlock));
  const std::vector<int64_t> conversations = {8, 16, 32};
  std::printf("| shape | cache | page | pages/block | waste | KV B/token at 8k | 8k sequences |");
  for (int64_t c : conversations) std::printf(" hit rate, %lld chats |", static_cast<long long>(c));
  std::printf("\n|---|---|---|---|---|---|---|");
  for (size_t i = 0; i < conversations.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (const Shape& shape : shapes) {
    const KvCacheSpec hybrid = spec_of(shape);
    for (const KvCacheSpec& spec : {hybrid, without_windows(hybrid)}) {
      const KvPageLayout layout = *plan_page_layout(spec);
      const Capacity c = capacity(spec, pool, 8192);
      std::printf("| %s | %s | %.0f KiB | %lld | %lld B | %.0f | %lld |", shape.name.c_str(),
                  spec.has_sliding() ? "layer groups" : "every layer full", layout.page_bytes / 1024.0,
                  static_cast<long long>(layout.pages_per_block_all()), static_cast<long long>(layout.waste_per_block(spec)),
                  c.bytes_per_token, static_cast<long long>(c.sequences));
      for (int64_t n : conversations) std::printf(" %.3f |", multi_turn(spec, pool, n, 6, 256, 256));
      std::printf("\n");
    }
  }
  std::printf("\nmulti-turn: 6 turns of user 256 + reply 256 tokens (decoded one per step), chats round-robin,\n"
              "each turn's prompt the whole history (last turn 2,816 tokens); hit rate = cached / prompt tokens\n");
  return 0;
}
