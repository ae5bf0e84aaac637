#include "server/http/errors.h"

namespace pagoda::http {

using nlohmann::json;

int http_status_for(const Status& status, bool shutting_down) {
  switch (status.code()) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kTooLarge: return 413;
    case StatusCode::kUnavailable: return shutting_down ? 503 : 429;
    case StatusCode::kAborted: return shutting_down ? 503 : 500;
    case StatusCode::kResourceExhausted: return 507;
    case StatusCode::kError: return 500;
  }
  return 500;
}

std::string error_body(int http_status, const std::string& message, const std::string& param, const std::string& code) {
  const char* type = "server_error";
  switch (http_status) {
    case 400:
    case 411:
    case 413: type = "invalid_request_error"; break;
    case 401: type = "authentication_error"; break;
    case 404: type = "not_found_error"; break;
    case 429: type = "rate_limit_exceeded"; break;
    case 503: type = "service_unavailable"; break;
    case 507: type = "insufficient_storage"; break;
    default: break;
  }
  json error = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) error["param"] = param;
  if (!code.empty()) error["code"] = code;
  return dump(json{{"error", error}});
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace pagoda::http
