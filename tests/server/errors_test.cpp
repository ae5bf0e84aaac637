// Status -> HTTP status, the OpenAI error object, JSON text and SSE framing (server/http/errors.h).
#include "server/http/errors.h"

#include <gtest/gtest.h>

namespace pagoda::http {
namespace {

using nlohmann::json;

TEST(HttpErrors, StatusCodes) {
  EXPECT_EQ(http_status_for(Status::invalid_argument("x"), false), 400);
  EXPECT_EQ(http_status_for(Status::not_found("x"), false), 404);
  EXPECT_EQ(http_status_for(Status::too_large("x"), false), 413);
  EXPECT_EQ(http_status_for(Status::unavailable("x"), false), 429);
  EXPECT_EQ(http_status_for(Status::unavailable("x"), true), 503);
  EXPECT_EQ(http_status_for(Status::error("x"), false), 500);
}

TEST(HttpErrors, ErrorObject) {
  const json e = json::parse(error_body(400, "temperature: must be a number", "temperature"))["error"];
  EXPECT_EQ(e["message"], "temperature: must be a number");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "temperature");
  EXPECT_TRUE(e["code"].is_null());
  EXPECT_EQ(json::parse(error_body(401, "no", "", "invalid_api_key"))["error"]["code"], "invalid_api_key");
}

TEST(HttpErrors, InvalidUtf8IsReplacedNotThrown) {
  EXPECT_EQ(dump(json("a\xff")), "\"a\xef\xbf\xbd\"");
}

TEST(HttpErrors, SseFraming) {
  EXPECT_EQ(sse_event("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

}  // namespace
}  // namespace pagoda::http
