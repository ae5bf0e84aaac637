// `pagoda bench --prefix-ttft N --tiers`: TTFT of a request whose N-token prefix is in the pool,
// in the host tier, in the disk tier, or nowhere (recomputed), and the disk tier's read
// bandwidth while it promotes (the engine needs --kv-host-mem and --kv-disk-dir).
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "model/text/tokenizer.h"

namespace pagoda::tools {

struct TierTtftOptions {
  int64_t prefix_tokens = 1024;
  int reps = 5;
  bool json = false;
  bool quiet = false;
  std::string model_path;
};

int bench_tier_ttft(const TierTtftOptions& o, engine::Engine& eng, const model::Tokenizer& tok);

}  // namespace pagoda::tools
