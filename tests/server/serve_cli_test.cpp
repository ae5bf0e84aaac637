// `pagoda serve` as a user runs it: it prints its URL and a curl line that works as is, answers,
// and on SIGTERM drains (or, past --drain-timeout, aborts) in-flight work and exits 0.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "pagoda_process.h"
#include "shell.h"
#include "server_fixture.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

// `pagoda serve` on stories260K, any free port.
class ServeProcess : public PagodaProcess {
 public:
  explicit ServeProcess(const std::string& extra_args, bool builtin = false)
      : PagodaProcess("serve " + std::string(builtin ? "" : "-m " + stories_dir() + "/stories260K.gguf -c 512 ") +
                      "--port 0 -t 1 " + extra_args) {}
};

int port_of(const std::string& url_line) {
  const size_t colon = url_line.rfind(':');
  return colon == std::string::npos ? -1 : std::atoi(url_line.c_str() + colon + 1);
}

std::string shell(const std::string& cmd) { return run_shell(cmd).out; }

// The welcome lines after the URL line, up to the last one (the `pagoda explain` hint).
std::vector<std::string> welcome(ServeProcess& serve) {
  std::vector<std::string> lines;
  for (int i = 0; i < 12; ++i) {
    lines.push_back(serve.line());
    if (lines.back().find("pagoda explain") != std::string::npos || lines.back().empty()) break;
  }
  return lines;
}

std::string line_with(const std::vector<std::string>& lines, const std::string& prefix) {
  for (const std::string& l : lines) {
    if (l.rfind(prefix, 0) == 0) return l.substr(prefix.size());
  }
  return "";
}

TEST(ServeCli, PrintsAWorkingCurlLineAndStopsOnSigterm) {
  ServeProcess serve("");
  const std::string url_line = serve.line();
  ASSERT_NE(url_line.find("http://127.0.0.1:"), std::string::npos) << url_line << serve.err();
  const std::vector<std::string> lines = welcome(serve);
  const std::string curl_line = line_with(lines, "  try: ");
  ASSERT_EQ(curl_line.rfind("curl ", 0), 0u) << curl_line;
  EXPECT_NE(line_with(lines, "  model: ").find("llama, 5 layers"), std::string::npos) << lines[0];
  const json reply = json::parse(shell(curl_line));
  EXPECT_EQ(reply["object"], "text_completion") << reply;
  EXPECT_FALSE(reply["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(reply["model"], "stories260K");
  EXPECT_EQ(serve.terminate(), 0) << serve.err();
  EXPECT_NE(serve.err().find("pagoda serve: stopped"), std::string::npos) << serve.err();
}

TEST(ServeCli, TheBuiltInModelSaysWhatItIsAndWhereTheDashboardIs) {
  ServeProcess serve("", /*builtin=*/true);
  const std::string url_line = serve.line();
  const int port = port_of(url_line);
  ASSERT_GT(port, 0) << url_line << serve.err();
  const std::vector<std::string> lines = welcome(serve);
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  EXPECT_NE(all.find("BUILT-IN model: random weights"), std::string::npos) << all;
  EXPECT_NE(all.find("pagoda serve -m MODEL.gguf"), std::string::npos) << all;
  const std::string dashboard = line_with(lines, "  dashboard: ");
  ASSERT_FALSE(dashboard.empty()) << all;
  const std::string page_url = dashboard.substr(0, dashboard.find(' '));
  EXPECT_EQ(page_url, "http://127.0.0.1:" + std::to_string(port) + "/dashboard");
  EXPECT_NE(shell("curl -s " + page_url).find("<title>Pagoda"), std::string::npos);
  EXPECT_EQ(serve.terminate(), 0) << serve.err();
}

TEST(ServeCli, NoDashboardTurnsThePageOff) {
  ServeProcess serve("--no-dashboard");
  const std::string url_line = serve.line();
  const int port = port_of(url_line);
  ASSERT_GT(port, 0) << serve.err();
  const std::vector<std::string> lines = welcome(serve);
  EXPECT_EQ(line_with(lines, "  dashboard: "), "");
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(shell("curl -s -o /dev/null -w '%{http_code}' " + base + "/dashboard"), "404");
  EXPECT_EQ(shell("curl -s -o /dev/null -w '%{http_code}' " + base + "/v1/kv/stats"), "200");  // the API stays
  EXPECT_EQ(serve.terminate(), 0) << serve.err();
}

TEST(ServeCli, SigtermDrainsInFlightRequests) {
  ServeProcess serve("--drain-timeout 60");
  const int port = port_of(serve.line());
  ASSERT_GT(port, 0) << serve.err();
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}};
  const int fd = send_raw(port, post_request("/v1/completions", body.dump()));
  std::string got;
  char buf[4096];
  while (got.find("data: {") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  std::thread stopper([&] { EXPECT_EQ(serve.terminate(), 0) << serve.err(); });
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) got.append(buf, static_cast<size_t>(n));
  close(fd);
  stopper.join();
  // The request finished in full before the process went away.
  EXPECT_NE(got.find("\"finish_reason\":\"length\""), std::string::npos) << got.substr(got.size() > 400 ? got.size() - 400 : 0);
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos);
}

TEST(ServeCli, BadFlagsFailClearly) {
  ServeProcess serve("--chat-template vicuna");
  EXPECT_EQ(serve.line(), "");
  EXPECT_EQ(serve.terminate(), 1);
  EXPECT_NE(serve.err().find("unknown --chat-template 'vicuna'"), std::string::npos) << serve.err();
}

// A step limit above what the engine can do is refused with the limit named, not clamped.
TEST(ServeCli, StepLimitsAboveTheEnginesAreRefused) {
  {
    ServeProcess serve("-b 64 --max-num-batched-tokens 128");
    EXPECT_EQ(serve.line(), "");
    EXPECT_EQ(serve.terminate(), 1);
    EXPECT_NE(serve.err().find("--max-num-batched-tokens 128 is more than one forward pass takes (-b/--batch-size 64)"),
              std::string::npos)
        << serve.err();
  }
  {
    ServeProcess serve("-b 64 --max-num-seqs 100");
    EXPECT_EQ(serve.line(), "");
    EXPECT_EQ(serve.terminate(), 1);
    EXPECT_NE(serve.err().find("--max-num-seqs 100 is more than the tokens per step (64"), std::string::npos)
        << serve.err();
  }
}

// -v: the step loop logs each step's scheduling decisions at debug level (and not without it).
TEST(ServeCli, VerboseLogsEachStepsDecisions) {
  for (bool verbose : {true, false}) {
    ServeProcess serve(verbose ? "-v" : "");
    const std::string url_line = serve.line();
    ASSERT_NE(url_line.find("http://127.0.0.1:"), std::string::npos) << url_line << serve.err();
    const std::string curl_line = line_with(welcome(serve), "  try: ");
    const json reply = json::parse(shell(curl_line));
    EXPECT_EQ(reply["object"], "text_completion") << reply;
    EXPECT_EQ(serve.terminate(), 0) << serve.err();
    const std::string err = serve.err();
    const bool logged = err.find("step 1: 1 sequences (0 decoding, 1 prefilling") != std::string::npos &&
                        err.find("admitted 1 (prefix hit") != std::string::npos &&
                        err.find(" decoding, 0 prefilling 0 tokens), 1 tokens; waiting 0") != std::string::npos;
    EXPECT_EQ(logged, verbose) << err;
  }
}


TEST(ServeCli, PinPromptPinsFilesAtStartUpAndBadOnesFailClearly) {
  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/pagoda-pin-" + std::to_string(getpid()) + ".txt";
  const std::string text =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
      "One day, she saw a big, red ball.";
  std::ofstream(file) << text;
  {
    ServeProcess serve("--pin-prompt " + file + " --max-pinned-share 0.25");
    const int port = port_of(serve.line());
    ASSERT_GT(port, 0) << serve.err();
    EXPECT_NE(serve.err().find("pinned " + file), std::string::npos) << serve.err();
    const std::string base = "http://127.0.0.1:" + std::to_string(port);
    const json pins = json::parse(shell("curl -s " + base + "/v1/cache/pins"));
    ASSERT_EQ(pins["data"].size(), 1u) << pins.dump();
    EXPECT_EQ(pins["data"][0]["label"], file);
    EXPECT_TRUE(pins["data"][0]["expires_at"].is_null());
    EXPECT_EQ(pins["max_pinned_blocks"].get<int64_t>(), pins["num_blocks"].get<int64_t>() / 4);
    // A completion that starts with the file's text hits the pinned blocks.
    const json body = {{"prompt", text + " It was fun."}, {"max_tokens", 1}};
    const json reply = json::parse(shell("curl -s " + base + "/v1/completions -H 'Content-Type: application/json' -d '" +
                                         body.dump() + "'"));
    EXPECT_EQ(reply["usage"]["prompt_tokens_details"]["cached_tokens"], pins["data"][0]["pinned_tokens"]) << reply.dump();
    EXPECT_EQ(serve.terminate(), 0) << serve.err();
  }
  ServeProcess missing("--pin-prompt " + dir + "/no-such-pin-file.txt");
  EXPECT_EQ(missing.line(), "");
  EXPECT_EQ(missing.terminate(), 1);
  EXPECT_NE(missing.err().find("--pin-prompt " + dir + "/no-such-pin-file.txt: cannot open it"), std::string::npos)
      << missing.err();
  std::remove(file.c_str());
}

}  // namespace
}  // namespace pagoda::testing
