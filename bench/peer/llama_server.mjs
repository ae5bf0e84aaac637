#!/usr/bin/env node
// A small OpenAI-compatible HTTP server over llama.cpp (CPU, through node-llama-cpp): the peer
// that `pagoda bench-serve` measures next to `pagoda serve` (bench/serve_side_by_side.sh).
//
// Like llama.cpp's own server it has S slots: one llama.cpp context with S sequences, each
// sequence holding one request at a time; node-llama-cpp batches the evaluations of all busy
// sequences into shared llama_decode calls. Requests beyond S wait in FIFO order. Prefix reuse
// works like llama.cpp server's cache_prompt: a request takes the free slot whose KV holds the
// longest prefix of its prompt and evaluates only the rest (reported as
// usage.prompt_tokens_details.cached_tokens); --no-prefix-cache clears a slot before each use.
//
// Endpoints: GET /health, GET /v1/models, POST /v1/completions and /v1/chat/completions
// ("prompt" or "messages", max_tokens, temperature (0 or absent: greedy), ignore_eos, stream,
// stream_options.include_usage). Chat is formatted as plain "System:/User:/Assistant:" lines.
import http from "node:http";
import {fail, loadLlama, loadModel, parseArgs, parsePositiveInt} from "./common.mjs";

const usage = `usage: node bench/peer/llama_server.mjs --model FILE.gguf [options]
  --port N          listen port (default 8090)
  --host ADDR       listen address (default 127.0.0.1)
  --slots N         parallel sequences (default 16)
  --ctx-size N      context tokens per slot (default 2048)
  --threads N       llama.cpp threads (default 2)
  --batch-size N    tokens per llama_decode (default 512)
  --no-prefix-cache never reuse a slot's KV for a new request
`;

const args = parseArgs(process.argv.slice(2), {
    "model": "string", "port": "string", "host": "string", "slots": "string", "ctx-size": "string",
    "threads": "string", "batch-size": "string", "no-prefix-cache": "boolean",
}, usage);
if (args.model == null)
    fail(`--model is required\n${usage}`);
const port = parsePositiveInt("port", args.port ?? "8090");
const host = args.host ?? "127.0.0.1";
const slotCount = parsePositiveInt("slots", args.slots ?? "16");
const ctxSize = parsePositiveInt("ctx-size", args["ctx-size"] ?? "2048");
const threads = parsePositiveInt("threads", args.threads ?? "2");
const batchSize = parsePositiveInt("batch-size", args["batch-size"] ?? "512");
const prefixCache = !args["no-prefix-cache"];
const modelName = args.model.split("/").pop();

const llama = await loadLlama();
const model = await loadModel(llama, args.model);
const context = await model.createContext({sequences: slotCount, contextSize: ctxSize, batchSize, threads});
const slots = Array.from({length: slotCount}, () => ({sequence: context.getSequence(), busy: false}));
const waiting = [];  // resolve functions of requests waiting for a slot, FIFO

function commonPrefix(a, b) {
    let n = 0;
    while (n < a.length && n < b.length && a[n] === b[n])
        n++;
    return n;
}

// A free slot, preferring the longest cached prefix of `tokens`; waits when all are busy.
async function acquireSlot(tokens) {
    for (;;) {
        let best = null, bestLen = -1;
        for (const slot of slots) {
            if (slot.busy)
                continue;
            const len = prefixCache ? commonPrefix(slot.sequence.contextTokens, tokens) : 0;
            if (len > bestLen) {
                best = slot;
                bestLen = len;
            }
        }
        if (best != null) {
            best.busy = true;
            return best;
        }
        await new Promise((resolve) => waiting.push(resolve));
    }
}

function releaseSlot(slot) {
    slot.busy = false;
    waiting.shift()?.();
}

function formatChat(messages) {
    const names = {system: "System", user: "User", assistant: "Assistant"};
    let text = "";
    for (const m of messages) {
        if (typeof m?.content !== "string" || !(m.role in names))
            throw new Error("every message needs a role (system, user, assistant) and string content");
        text += `${names[m.role]}: ${m.content}\n`;
    }
    return text + "Assistant:";
}

function tokenizePrompt(text) {
    const tokens = model.tokenize(text);
    if (model.tokens.shouldPrependBosToken && model.tokens.bos != null)
        tokens.unshift(model.tokens.bos);
    return tokens;
}

class HttpError extends Error {
    constructor(status, message) {
        super(message);
        this.status = status;
    }
}

// Generates for one request on one slot; onText(delta) per released text piece.
async function generate(slot, promptTokens, {maxTokens, ignoreEos, temperature}, onText, isCancelled) {
    const sequence = slot.sequence;
    let cached = 0;
    if (prefixCache) {
        // Keep the shared prefix, but always evaluate at least one prompt token for the logits.
        cached = Math.min(commonPrefix(sequence.contextTokens, promptTokens), promptTokens.length - 1);
        if (cached < sequence.nextTokenIndex)
            await sequence.eraseContextTokenRanges([{start: cached, end: sequence.nextTokenIndex}]);
    } else {
        await sequence.clearHistory();
    }
    const generated = [];
    let sent = "";
    let finishReason = "length";
    const evaluateOptions = temperature > 0 ? {temperature} : {};
    for await (const token of sequence.evaluate(promptTokens.slice(cached), evaluateOptions)) {
        if (!ignoreEos && model.isEogToken(token)) {
            finishReason = "stop";
            break;
        }
        generated.push(token);
        const text = model.detokenize(generated);
        if (!text.endsWith("\uFFFD") && text.length > sent.length) {
            onText(text.slice(sent.length));
            sent = text;
        }
        if (generated.length >= maxTokens || isCancelled())
            break;
    }
    const text = model.detokenize(generated);
    if (text.length > sent.length && text.startsWith(sent))
        onText(text.slice(sent.length));
    return {completionTokens: generated.length, cachedTokens: cached, finishReason};
}

function readBody(req) {
    return new Promise((resolve, reject) => {
        const parts = [];
        req.on("data", (d) => parts.push(d));
        req.on("end", () => resolve(Buffer.concat(parts).toString("utf8")));
        req.on("error", reject);
    });
}

function sendJson(res, status, body) {
    res.writeHead(status, {"Content-Type": "application/json"});
    res.end(JSON.stringify(body));
}

let nextId = 0;

async function handleCompletion(req, res, chat) {
    let body;
    try {
        body = JSON.parse(await readBody(req));
    } catch {
        throw new HttpError(400, "request body is not JSON");
    }
    let promptText;
    if (chat) {
        if (!Array.isArray(body.messages) || body.messages.length === 0)
            throw new HttpError(400, "messages must be a non-empty array");
        try {
            promptText = formatChat(body.messages);
        } catch (e) {
            throw new HttpError(400, e.message);
        }
    } else {
        if (typeof body.prompt !== "string")
            throw new HttpError(400, "prompt must be a string");
        promptText = body.prompt;
    }
    const maxTokens = body.max_tokens ?? body.max_completion_tokens ?? 16;
    if (!Number.isInteger(maxTokens) || maxTokens < 1)
        throw new HttpError(400, "max_tokens must be a positive integer");
    const promptTokens = tokenizePrompt(promptText);
    if (promptTokens.length === 0)
        throw new HttpError(400, "the prompt is empty");
    if (promptTokens.length + maxTokens > ctxSize)
        throw new HttpError(413, `prompt (${promptTokens.length} tokens) + max_tokens (${maxTokens}) exceeds the slot context (${ctxSize})`);
    const params = {maxTokens, ignoreEos: body.ignore_eos === true, temperature: Number(body.temperature ?? 0)};
    const stream = body.stream === true;
    const includeUsage = body.stream_options?.include_usage === true;
    const id = `${chat ? "chatcmpl" : "cmpl"}-${nextId++}`;
    const created = Math.floor(Date.now() / 1000);
    const object = chat ? "chat.completion.chunk" : "text_completion";
    let cancelled = false;
    res.on("close", () => { cancelled = true; });

    const slot = await acquireSlot(promptTokens);
    try {
        const chunk = (choice) => ({id, object, created, model: modelName, choices: [choice]});
        const event = (data) => res.write(`data: ${JSON.stringify(data)}\n\n`);
        let text = "";
        if (stream) {
            res.writeHead(200, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"});
            if (chat)
                event(chunk({index: 0, delta: {role: "assistant", content: ""}, finish_reason: null}));
        }
        const onText = (delta) => {
            text += delta;
            if (stream)
                event(chunk(chat ? {index: 0, delta: {content: delta}, finish_reason: null}
                    : {index: 0, text: delta, logprobs: null, finish_reason: null}));
        };
        const r = await generate(slot, promptTokens, params, onText, () => cancelled);
        const usage = {
            prompt_tokens: promptTokens.length,
            completion_tokens: r.completionTokens,
            total_tokens: promptTokens.length + r.completionTokens,
            prompt_tokens_details: {cached_tokens: r.cachedTokens},
        };
        if (stream) {
            event(chunk(chat ? {index: 0, delta: {}, finish_reason: r.finishReason}
                : {index: 0, text: "", logprobs: null, finish_reason: r.finishReason}));
            if (includeUsage)
                event({id, object, created, model: modelName, choices: [], usage});
            res.end("data: [DONE]\n\n");
        } else {
            const choice = chat ? {index: 0, message: {role: "assistant", content: text}, finish_reason: r.finishReason}
                : {index: 0, text, logprobs: null, finish_reason: r.finishReason};
            sendJson(res, 200, {id, object: chat ? "chat.completion" : "text_completion", created, model: modelName,
                choices: [choice], usage});
        }
    } finally {
        releaseSlot(slot);
    }
}

const server = http.createServer(async (req, res) => {
    try {
        const url = req.url.split("?")[0];
        if (req.method === "GET" && url === "/health")
            return sendJson(res, 200, {status: "ok"});
        if (req.method === "GET" && url === "/v1/models")
            return sendJson(res, 200, {object: "list", data: [{id: modelName, object: "model", owned_by: "llama.cpp"}]});
        if (req.method === "POST" && (url === "/v1/completions" || url === "/v1/chat/completions"))
            return await handleCompletion(req, res, url === "/v1/chat/completions");
        throw new HttpError(404, `no route ${req.method} ${url}`);
    } catch (e) {
        const status = e instanceof HttpError ? e.status : 500;
        if (!res.headersSent)
            sendJson(res, status, {error: {message: e.message, type: status === 500 ? "server_error" : "invalid_request_error"}});
        else
            res.end(`data: ${JSON.stringify({error: {message: e.message}})}\n\n`);
        if (status === 500)
            process.stderr.write(`error: ${e.stack}\n`);
    }
});
server.keepAliveTimeout = 60_000;
server.listen(port, host, () => {
    process.stderr.write(`llama_server: ${modelName} on http://${host}:${port} (${slotCount} slots x ${ctxSize} tokens, ` +
        `${threads} threads, prefix cache ${prefixCache ? "on" : "off"})\n`);
});
for (const signal of ["SIGINT", "SIGTERM"])
    process.on(signal, () => process.exit(0));
