// Error statuses and objects, auth, tenants, back-pressure, draining and clients that hang up.
#include "server/http_server.h"

#include "server_fixture.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

json error_of(const httplib::Result& r) {
  const json j = json::parse(r->body);
  EXPECT_TRUE(j.contains("error")) << r->body;
  EXPECT_TRUE(j["error"]["message"].is_string()) << r->body;
  EXPECT_TRUE(j["error"]["type"].is_string()) << r->body;
  return j["error"];
}

TEST_F(ServerTest, BadRequestsGet400WithTheField) {
  start();
  auto raw = client_->Post("/v1/completions", "{\"prompt\": ", "application/json");
  ASSERT_EQ(raw->status, 400);
  EXPECT_EQ(error_of(raw)["type"], "invalid_request_error");

  auto wrong_type = post("/v1/completions", {{"prompt", "a"}, {"temperature", "hot"}});
  ASSERT_EQ(wrong_type->status, 400);
  EXPECT_EQ(error_of(wrong_type)["param"], "temperature");

  auto huge = post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1000000000000LL}});
  ASSERT_EQ(huge->status, 400);
  EXPECT_EQ(error_of(huge)["param"], "max_tokens");

  auto bad_utf8 = client_->Post("/v1/completions", "{\"prompt\": \"\xff\xfe\"}", "application/json");
  ASSERT_EQ(bad_utf8->status, 400);
  error_of(bad_utf8);

  auto bad_role = post("/v1/chat/completions", {{"messages", {{{"role", "wizard"}, {"content", "x"}}}}});
  ASSERT_EQ(bad_role->status, 400);
  EXPECT_EQ(error_of(bad_role)["param"], "messages[0].role");
  EXPECT_TRUE(engine_->submitted().empty());
}

TEST_F(ServerTest, UnknownModelAndRouteGet404) {
  start();
  auto model = post("/v1/completions", {{"model", "gpt-4"}, {"prompt", "a"}});
  ASSERT_EQ(model->status, 404);
  EXPECT_EQ(error_of(model)["code"], "model_not_found");
  auto route = client_->Get("/v1/engines");
  ASSERT_EQ(route->status, 404);
  EXPECT_EQ(error_of(route)["type"], "not_found_error");
  EXPECT_EQ(client_->Get("/v1/completions")->status, 404);  // wrong method
}

TEST_F(ServerTest, TooLongGets413) {
  server::ServerConfig config;
  config.max_body_bytes = 4096;
  start(config);
  auto body = post("/v1/completions", {{"prompt", std::string(8000, 'a')}});
  ASSERT_EQ(body->status, 413);
  error_of(body);
  std::vector<int32_t> long_prompt(kContext + 10, 403);
  auto prompt = post("/v1/completions", {{"prompt", long_prompt}});
  ASSERT_EQ(prompt->status, 413);
  EXPECT_EQ(error_of(prompt)["code"], "context_length_exceeded");
}

TEST_F(ServerTest, FullQueueGets429WithRetryAfter) {
  start({}, /*max_waiting=*/1);
  engine_->pause(true);
  std::thread first([&] {
    httplib::Client c("127.0.0.1", port_);
    auto r = c.Post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}}.dump(), "application/json");
    EXPECT_EQ(r->status, 200);
  });
  ASSERT_TRUE(engine_->wait_for([&] { return engine_->active_locked() == 1; }));
  auto second = post("/v1/completions", {{"prompt", "b"}, {"max_tokens", 2}});
  ASSERT_EQ(second->status, 429);
  EXPECT_EQ(second->get_header_value("Retry-After"), "1");
  EXPECT_EQ(error_of(second)["type"], "rate_limit_exceeded");
  engine_->pause(false);
  first.join();
}

TEST_F(ServerTest, DrainingGets503) {
  start();
  server_->begin_drain();
  EXPECT_EQ(client_->Get("/health")->status, 503);
  auto r = post("/v1/completions", {{"prompt", "a"}});
  ASSERT_EQ(r->status, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  error_of(r);
}

TEST_F(ServerTest, ShutdownWithoutDrainEndsStreamsWithAnErrorEvent) {
  start();
  engine_->pause(true);
  int status = 0;
  std::string body;
  std::thread client([&] {
    httplib::Client c("127.0.0.1", port_);
    auto r = c.Post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 5}, {"stream", true}}.dump(), "application/json");
    if (r) {
      status = r->status;
      body = r->body;
    }
  });
  ASSERT_TRUE(engine_->wait_for([&] { return engine_->active_locked() == 1; }));
  server_->begin_drain();
  engine_->shutdown(false);  // aborts what is in flight
  client.join();
  EXPECT_EQ(status, 200);  // sent before the failure
  const SseEvents events = parse_sse(body);
  EXPECT_TRUE(events.done);
  ASSERT_FALSE(events.chunks.empty());
  EXPECT_EQ(events.chunks.back()["error"]["type"], "service_unavailable") << body;
}

TEST_F(ServerTest, ApiKeysGuardTheV1Routes) {
  server::ServerConfig config;
  config.api_keys = {"k1", "k2"};
  start(config);
  auto none = post("/v1/completions", {{"prompt", "a"}});
  ASSERT_EQ(none->status, 401);
  EXPECT_EQ(error_of(none)["code"], "invalid_api_key");
  EXPECT_EQ(post("/v1/completions", {{"prompt", "a"}}, {{"Authorization", "Bearer nope"}})->status, 401);
  EXPECT_EQ(client_->Get("/v1/models")->status, 401);
  EXPECT_EQ(post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}}, {{"Authorization", "Bearer k2"}})->status, 200);
  EXPECT_EQ(client_->Get("/health")->status, 200);
  EXPECT_EQ(client_->Get("/metrics")->status, 200);
}

int cached_tokens(const httplib::Result& r) {
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body)["usage"]["prompt_tokens_details"]["cached_tokens"];
}

TEST_F(ServerTest, SaltPerApiKeySeparatesTenantsCaches) {
  server::ServerConfig config;
  config.api_keys = {"k1", "k2"};
  config.salt_per_api_key = true;
  start(config);
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 1}};
  EXPECT_EQ(cached_tokens(post("/v1/completions", body, {{"Authorization", "Bearer k1"}})), 0);
  EXPECT_EQ(cached_tokens(post("/v1/completions", body, {{"Authorization", "Bearer k1"}})), 4);
  EXPECT_EQ(cached_tokens(post("/v1/completions", body, {{"Authorization", "Bearer k2"}})), 0);
  const auto submitted = engine_->submitted();
  EXPECT_NE(submitted[0].cache_salt, submitted[2].cache_salt);
}

TEST_F(ServerTest, WithoutSaltPerKeyTenantsShareTheCache) {
  server::ServerConfig config;
  config.api_keys = {"k1", "k2"};
  start(config);
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 1}};
  EXPECT_EQ(cached_tokens(post("/v1/completions", body, {{"Authorization", "Bearer k1"}})), 0);
  EXPECT_EQ(cached_tokens(post("/v1/completions", body, {{"Authorization", "Bearer k2"}})), 4);
}

void expect_disconnect_aborts(ServerTest& t, FakeServingEngine& engine, int port, bool stream) {
  engine.pause(true);  // the request stays queued: only the hang-up can end it
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 5}, {"stream", stream}};
  const int fd = send_raw(port, post_request("/v1/completions", body.dump()));
  ASSERT_TRUE(engine.wait_for([&] { return engine.active_locked() == 1; }));
  close(fd);
  ASSERT_TRUE(engine.wait_for([&] { return engine.aborted_locked() == 1; })) << "the server never aborted";
  engine.pause(false);
  ASSERT_TRUE(engine.wait_for([&] { return engine.active_locked() == 0; }));
}

TEST_F(ServerTest, ClientHangingUpAbortsItsStreamingRequest) {
  start();
  expect_disconnect_aborts(*this, *engine_, port_, true);
}

TEST_F(ServerTest, ClientHangingUpAbortsItsRequest) {
  start();
  expect_disconnect_aborts(*this, *engine_, port_, false);
}

}  // namespace
}  // namespace pagoda::testing
