// TextStream: the text of one generated choice, released as UTF-8-safe deltas, with stop
// strings held back.
//
// Each pushed token's bytes go through a model::StreamDecoder (an unfinished UTF-8 character is
// held there). Of the decoded text not yet released, the longest suffix that could still grow
// into a stop string is held back; the rest is released. When a stop string appears, the text
// up to its first occurrence is released and the stream is stopped: the choice's text ends
// before the match. Concatenating every release and finish() gives the decoded text cut before
// the first stop string.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/text/tokenizer.h"

namespace pagoda::engine {

class TextStream {
 public:
  // The tokenizer must outlive the stream. Precondition: no empty stop string. previous: the
  // last prompt token (-1: none), so the text continues the prompt (model::StreamDecoder).
  TextStream(const model::Tokenizer& tokenizer, std::vector<std::string> stops, int32_t previous = -1);

  // Appends the text this token releases to `out`; true when a stop string completed (then
  // push/finish must not be called again).
  bool push(int32_t token, std::string& out);
  // The choice ended otherwise (length, stop token, EOS): appends what is held (the decoder's
  // unfinished bytes as U+FFFD) to `out`, unless that completes a stop string (then only the
  // text before it).
  void finish(std::string& out);
  bool stopped() const { return stopped_; }

 private:
  bool release(std::string& out, bool at_end);

  model::StreamDecoder decoder_;
  std::vector<std::string> stops_;
  std::string held_;      // decoded, not yet released (could begin a stop string)
  bool stopped_ = false;
};

}  // namespace pagoda::engine
