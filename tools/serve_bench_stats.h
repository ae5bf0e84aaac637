// Statistics of `pagoda bench-serve`: what one streamed request measured (RequestRecord) and
// the pure aggregation of many of them into the numbers the tool reports (summarize).
//
// Times are seconds on one monotonic clock, relative to the start of the run. A request's
// "token times" are the arrival times of the SSE chunks that carried generated text: TTFT is
// the first one minus the send time, inter-token latency (ITL) the gaps between consecutive
// ones (a chunk that releases several tokens' worth of held-back text counts once, as in
// vLLM's benchmark_serving). Output token counts come from the server's usage, not chunks.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace pagoda::tools {

struct RequestRecord {
  bool ok = false;
  std::string error;                // when !ok: "HTTP 503: queue full", "connection: ...", ...
  double send_s = 0;                // request sent
  double end_s = 0;                 // last byte received (or the failure)
  std::vector<double> token_times_s;  // arrival of each text-carrying chunk; [chunks]
  bool usage_seen = false;          // the stream carried a usage object
  int64_t prompt_tokens = 0;        // from usage (0 when unseen)
  int64_t completion_tokens = 0;    // from usage; the number of text chunks when unseen
  int64_t cached_tokens = 0;        // usage.prompt_tokens_details.cached_tokens
};

// p50 / p90 / p99 and mean of a sample; all 0 for an empty one.
struct Distribution {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};

struct BenchSummary {
  int64_t requests = 0;             // records summarized
  int64_t succeeded = 0;
  int64_t failed = 0;
  int64_t missing_usage = 0;        // succeeded without a usage object (tokens counted by chunk)
  double duration_s = 0;            // first send -> last end
  int64_t prompt_tokens = 0;        // over succeeded requests
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  // Text chunks that failed requests streamed before failing (each at least one token): a
  // server that fails a request at its end (llama-server's chat parser on a reply cut inside a
  // UTF-8 character) has still generated and sent them.
  int64_t failed_streamed_tokens = 0;
  double requests_per_s = 0;        // succeeded / duration
  double output_tokens_per_s = 0;   // completion_tokens / duration
  double streamed_tokens_per_s = 0; // (completion_tokens + failed_streamed_tokens) / duration
  double input_tokens_per_s = 0;    // prompt_tokens / duration
  double prefix_cache_hit_rate = 0; // cached_tokens / prompt_tokens
  Distribution ttft_s;              // succeeded requests with at least one text chunk
  Distribution itl_s;               // every gap between consecutive text chunks, failed requests' too
  Distribution e2e_s;               // send -> end of succeeded requests
  std::map<std::string, int64_t> errors;  // message -> count
};

// The q-quantile (q in [0, 1]) by linear interpolation between closest ranks (numpy's
// default); 0 for an empty sample. Sorts its copy.
double percentile(std::vector<double> values, double q);
Distribution distribution(std::vector<double> values);

BenchSummary summarize(std::span<const RequestRecord> records);

}  // namespace pagoda::tools
