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

// Sampling controls: a +100 logit_bias forces its token under greedy decoding; penalties are accepted.
const forcedToken = 300;
const biased = await client.completions.create({
  model, prompt: [1, 403, 407], max_tokens: 4, temperature: 0, logit_bias: { [forcedToken]: 100 },
  presence_penalty: 0.5, frequency_penalty: 0.5, logprobs: 1,
});
check(biased.choices[0].logprobs.tokens.length === 4, "biased: 4 tokens");
const forcedText = biased.choices[0].logprobs.tokens[0];
check(biased.choices[0].logprobs.tokens.every((t) => t === forcedText), `logit_bias +100 forces one token: ${biased.choices[0].logprobs.tokens}`);

// An agent loop with the client's own types: tools offered with a forced call (the model's chat
// template is chatml, so hermes-style calls, constrained by the tool's parameters schema), then
// the call and its result sent back. (Short: the tools' instructions alone are ~300 of the
// built-in model's 512-token context.)
const tools = [{ type: "function", function: { name: "get_weather",
  parameters: { type: "object", properties: { city: { enum: ["Paris", "Rome"] } }, required: ["city"] } } }];
const call = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Paris?" }], tools, max_tokens: 200, temperature: 0,  // clipped to the context
  tool_choice: { type: "function", function: { name: "get_weather" } },
});
// The tools' instructions leave this 512-token model ~20 tokens, too few for its JSON: the call
// is cut ("length") and comes back as text; tests/server/structured_output_test.cpp checks
// forced calls on the engine with room to finish.
const callChoice = call.choices[0];
check(["tool_calls", "length"].includes(callChoice.finish_reason), `forced call finish_reason ${callChoice.finish_reason}`);
if (callChoice.finish_reason === "tool_calls") {
  check(callChoice.message.tool_calls[0].function.name === "get_weather", "the named tool");
  const args = JSON.parse(callChoice.message.tool_calls[0].function.arguments);
  check(["Paris", "Rome"].includes(args.city), `arguments follow the schema: ${JSON.stringify(args)}`);
} else {
  check(callChoice.message.content.startsWith("<tool_call>\n{\"name\": \"get_weather\""), "the cut call starts as forced");
}
const loop = await client.chat.completions.create({  // (no tools listed again: the context is short)
  model, max_tokens: 4, temperature: 0,
  messages: [
    { role: "user", content: "Paris?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
      function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }] },
    { role: "tool", tool_call_id: "call_1", content: "sunny" },
  ],
});
check(loop.choices.length === 1 && loop.usage.prompt_tokens > 30, "the tool result round trip is accepted and rendered");
try {
  await client.chat.completions.create({ model, messages, max_tokens: 1, tools, tool_choice: { type: "function", function: { name: "nope" } } });
  check(false, "an unknown tool_choice must fail");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.param === "tool_choice", `unknown tool_choice: 400, got ${e.status} ${e.param}`);
}

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
