// Request traces for replay (DESIGN.md: the `sim` module): Mooncake's JSONL format and a plain
// JSONL of token-id prompts, and the tokens a trace request stands for.
//
// Mooncake (FAST '25; ../shared/traces/README.md): one object a line,
//   {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [id, ...]}
// where hash_ids[i] names prompt block i of `block_tokens` (512) tokens and, through it, the
// whole prefix up to that block: two requests share their first k blocks exactly when their
// first k ids are equal. A request has ceil(input_length / block_tokens) ids; the last block
// may be partial.
// Plain: {"prompt_token_ids": [t, ...]} (or "tokens"), with optional "timestamp" (ms) and
// "output_length"; requests without a timestamp arrive in file order at 0.
//
// Tokens (synthesize_prompt): block i of a Mooncake request (replay_block_tokens long) is a
// deterministic run derived from hash_ids[i] alone, token j = mix(id, j) mod vocab_size, cut to the block's length. Equal ids
// give equal tokens, different ids different runs (with probability 1 - vocab^-block), so
// Pagoda's chained block hashing, at any block size, sees exactly the trace's sharing; a
// request's tokens total its input_length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace pagoda::sim {

struct TraceRequest {
  double timestamp_ms = 0;
  int64_t input_length = 0;             // prompt tokens
  int64_t output_length = 0;            // generated tokens
  std::vector<uint64_t> hash_ids;       // Mooncake: [ceil(input_length / block_tokens)]
  std::vector<int32_t> prompt_tokens;   // plain traces: [input_length]; Mooncake: empty
};

struct TraceOptions {
  int64_t block_tokens = 512;     // Mooncake's hash-id granularity (--trace-block-tokens)
  // Tokens each hash id becomes (--replay-block-tokens; 0: block_tokens). Smaller replays the
  // trace at reduced scale with the same sharing: a request of input_length tokens then has
  // ceil(input_length x replay_block_tokens / block_tokens) (its last block scaled alike).
  int64_t replay_block_tokens = 0;
  int32_t vocab_size = 32000;     // synthesized token ids are below it (plain traces: checked)
  int64_t max_requests = 0;       // > 0: read at most this many requests
};

// Reads a trace file; errors name the file, the line and the field. Timestamps must not
// decrease; lengths must be positive (output_length >= 0) and agree with the ids.
Result<std::vector<TraceRequest>> read_trace(const std::string& path, const TraceOptions& options);
// The same from text (tests).
Result<std::vector<TraceRequest>> parse_trace(const std::string& text, const TraceOptions& options,
                                              const std::string& name = "trace");

// The prompt tokens of `request` into out (resized to input_length): its own tokens for a
// plain trace, the hash ids' runs for a Mooncake one (see the top).
void synthesize_prompt(const TraceRequest& request, const TraceOptions& options, std::vector<int32_t>& out);

}  // namespace pagoda::sim
