// A `pagoda serve` child process on a free loopback port, with the calls the CLI-level tier tests
// make: a greedy completion of token ids, /metrics, one sample of /metrics.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pagoda_process.h"

namespace pagoda::testing {

class ServeProcess : public PagodaProcess {
 public:
  explicit ServeProcess(const std::string& args) : PagodaProcess(args) { port_ = port(); }
  int port_ = -1;

  // A greedy completion of prompt (a failed test and an empty object when it is not a 200).
  nlohmann::json complete(const std::vector<int32_t>& prompt, int max_tokens = 4) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60);
    const nlohmann::json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    if (!r || r->status != 200) {
      ADD_FAILURE() << (r ? r->body : std::string("no answer")) << err();
      return nlohmann::json::object();
    }
    return nlohmann::json::parse(r->body);
  }
  std::string metrics() {
    httplib::Client c("127.0.0.1", port_);
    auto r = c.Get("/metrics");
    return r && r->status == 200 ? r->body : "";
  }
  // The value of a sample line `name value` in /metrics (-1: absent).
  double metric(const std::string& name) {
    const std::string m = metrics();
    const size_t at = m.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::atof(m.c_str() + at + name.size() + 2);
  }
};

}  // namespace pagoda::testing
