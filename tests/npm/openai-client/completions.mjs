// The official client against `pagoda serve`: models, completions, chat, streaming with usage,
// n > 1, logprobs and error cases. Prints what the C++ side compares with reference outputs.
import OpenAI from "openai";
import { client, check, checkUsage } from "./common.mjs";

const models = await client.models.list();
const model = models.data[0]?.id;
check(typeof model === "string" && model.length > 0, "models.list() names the served model");

// Greedy completion.
const greedy = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 24, temperature: 0 });
check(greedy.object === "text_completion" && greedy.choices.length === 1, "completion shape");
check(greedy.choices[0].finish_reason === "length", `finish_reason length, got ${greedy.choices[0].finish_reason}`);
checkUsage(greedy.usage, "completion");
check(greedy.usage.completion_tokens === 24, "24 completion tokens");

// The same prompt again: its full blocks come from the prefix cache.
const again = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 24, temperature: 0 });
check(again.choices[0].text === greedy.choices[0].text, "greedy is deterministic");

// n > 1: greedy choices are all the single answer; sampled ones carry their index.
const several = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 24, temperature: 0, n: 3 });
check(several.choices.length === 3, "n = 3 gives 3 choices");
for (const [i, c] of several.choices.entries()) {
  check(c.index === i, `choice ${i} has index ${i}`);
  check(c.text === greedy.choices[0].text, `greedy choice ${i} equals the single answer`);
}
const sampled = await client.completions.create({ model, prompt: "Tom and Lily", max_tokens: 16, temperature: 1, seed: 5, n: 2 });
check(sampled.choices.length === 2, "sampled n = 2");
check(sampled.usage.completion_tokens <= 32, "sampled usage");

// Streaming with usage: the chunks add up to the non-streamed text.
const stream = await client.completions.create({
  model, prompt: "Once upon a time", max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let streamed = "";
let streamUsage = null;
let finish = null;
for await (const chunk of stream) {
  if (chunk.usage) streamUsage = chunk.usage;
  for (const c of chunk.choices) {
    streamed += c.text;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
check(streamed === greedy.choices[0].text, `streamed text equals the completion: ${JSON.stringify(streamed)}`);
check(finish === "length", "streamed finish_reason");
checkUsage(streamUsage, "stream");

// A prompt of several KV blocks, twice: the second finds its full blocks in the prefix cache.
const long = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball.";
const first = await client.completions.create({ model, prompt: long, max_tokens: 2, temperature: 0 });
const second = await client.completions.create({ model, prompt: long, max_tokens: 2, temperature: 0 });
check(first.usage.prompt_tokens > 32, "the long prompt spans several blocks");
check(second.usage.prompt_tokens_details.cached_tokens > first.usage.prompt_tokens_details.cached_tokens,
      `the repeated prompt reports cached tokens: ${JSON.stringify(second.usage)}`);

// Chat, plain and streamed.
const messages = [{ role: "user", content: "Tell me a story about a cat." }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
check(chat.object === "chat.completion", "chat object");
check(chat.choices[0].message.role === "assistant" && typeof chat.choices[0].message.content === "string", "chat message");
checkUsage(chat.usage, "chat");
const chatStream = await client.chat.completions.create({
  model, messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let chatStreamed = "";
let chatUsage = null;
for await (const chunk of chatStream) {
  if (chunk.usage) chatUsage = chunk.usage;
  for (const c of chunk.choices) chatStreamed += c.delta?.content ?? "";
}
check(chatStreamed === chat.choices[0].message.content, "streamed chat equals the chat reply");
checkUsage(chatUsage, "chat stream");

// Logprobs.
const lp = await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2 });
const content = lp.choices[0].logprobs?.content;
check(Array.isArray(content) && content.length === 4, "chat logprobs: one entry per token");
check(content.every((t) => t.logprob <= 0 && t.top_logprobs.length === 2), "chat logprobs: values and top 2");
check(content.every((t) => t.top_logprobs[0].logprob >= t.logprob - 1e-4), "greedy token is the most likely");

// Errors surface as the client's typed errors.
try {
  await client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 1 });
  check(false, "unknown model must fail");
} catch (e) {
  check(e instanceof OpenAI.NotFoundError && e.status === 404, `unknown model: 404, got ${e.status} ${e}`);
}
try {
  await client.completions.create({ model, prompt: "x", max_tokens: 1, temperature: 7 });
  check(false, "temperature 7 must fail");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400, `bad temperature: 400, got ${e.status}`);
  check(e.param === "temperature", `the error names the field, got ${e.param}`);
}

console.log(JSON.stringify({ model, greedy_text: greedy.choices[0].text, chat_text: chat.choices[0].message.content }));
