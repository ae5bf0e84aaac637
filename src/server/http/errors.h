// OpenAI-style error objects and JSON text, shared by every HTTP front (`pagoda serve`'s
// server and `pagoda router`).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace pagoda::http {

// HTTP status of a failed Status: 400 invalid, 404 not found, 413 too large, 429 unavailable
// (503 when the server is shutting down), 507 a full bound
// (resource exhausted: the pinned share of the KV pool), 499-like aborts and other errors: 500.
int http_status_for(const Status& status, bool shutting_down);

// {"error": {"message", "type", "param", "code"}}; type follows OpenAI ("invalid_request_error",
// "authentication_error", "not_found_error", "rate_limit_exceeded", "insufficient_storage",
// "server_error").
std::string error_body(int http_status, const std::string& message, const std::string& param = "",
                       const std::string& code = "");

// JSON text with ill-formed UTF-8 replaced (token pieces may be partial characters).
std::string dump(const nlohmann::json& j);

// One server-sent event carrying `data` ("data: ...\n\n").
inline std::string sse_event(const std::string& data) { return "data: " + data + "\n\n"; }
// The end of an OpenAI stream.
inline std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace pagoda::http
