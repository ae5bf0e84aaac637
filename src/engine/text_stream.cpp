#include "engine/text_stream.h"

#include <algorithm>

namespace pagoda::engine {

TextStream::TextStream(const model::Tokenizer& tokenizer, std::vector<std::string> stops, int32_t previous)
    : decoder_(tokenizer, previous), stops_(std::move(stops)) {
  for (const std::string& s : stops_) CHECK(!s.empty()) << "empty stop string";
}

bool TextStream::release(std::string& out, bool at_end) {
  size_t match = std::string::npos;
  for (const std::string& s : stops_) match = std::min(match, held_.find(s));
  if (match != std::string::npos) {
    out.append(held_, 0, match);
    held_.clear();
    stopped_ = true;
    return true;
  }
  size_t keep = 0;  // longest suffix of held_ that is a proper prefix of a stop string
  if (!at_end) {
    for (const std::string& s : stops_) {
      for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
        if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
      }
    }
  }
  out.append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

bool TextStream::push(int32_t token, std::string& out) {
  CHECK(!stopped_);
  held_ += decoder_.push(token);
  return release(out, /*at_end=*/false);
}

void TextStream::finish(std::string& out) {
  CHECK(!stopped_);
  held_ += decoder_.flush();
  release(out, /*at_end=*/true);
  stopped_ = true;
}

}  // namespace pagoda::engine
