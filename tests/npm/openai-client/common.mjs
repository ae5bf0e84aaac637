// Shared by the scripts: a client for the server at argv[2], and assertions that exit non-zero.
import OpenAI from "openai";

export const baseURL = process.argv[2];
if (!baseURL) {
  console.error("usage: node SCRIPT.mjs http://127.0.0.1:PORT [API_KEY]");
  process.exit(2);
}
export const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: process.argv[3] ?? "no-key", maxRetries: 0 });

export function check(condition, message) {
  if (!condition) {
    console.error(`FAILED: ${message}`);
    process.exit(1);
  }
}

export function checkUsage(usage, where) {
  check(usage && Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens > 0, `${where}: usage.prompt_tokens`);
  check(Number.isInteger(usage.completion_tokens), `${where}: usage.completion_tokens`);
  check(usage.total_tokens === usage.prompt_tokens + usage.completion_tokens, `${where}: usage.total_tokens`);
  check(Number.isInteger(usage.prompt_tokens_details?.cached_tokens), `${where}: usage.prompt_tokens_details.cached_tokens`);
}
