#!/usr/bin/env node
// Prefill and decode throughput of llama.cpp (CPU, through node-llama-cpp) on one GGUF file:
// the peer column of Pagoda's side-by-side benchmark (bench/run_side_by_side.sh).
//
// What is timed: llama.cpp's own eval counters (llama_perf_context: the time from the start
// of llama_decode() to the end of llama_synchronize(), as llama-bench and llama-cli report).
// They exclude sampling, tokenization and everything node-llama-cpp does in JavaScript. The
// JS wall-clock time around each evaluate call is reported next to them (*_wall) as a check.
//
//   prefill: a fresh context and sequence per rep; a prompt of exactly --prompt-tokens random
//            token ids (fixed seed) evaluated as one batch (batch size = ubatch size >= prompt),
//            with logits for the last token only.
//   decode:  a fresh context and sequence per rep; --decode-prompt-tokens random ids evaluated
//            (not timed), then --gen-tokens single-token evaluations, each token the greedy
//            (argmax) choice after the previous one.
// Each thread count gets one untimed warm-up (a prefill and a few decode steps) first, then
// --reps timed reps; the median is reported. Threads: llama.cpp's n_threads and
// n_threads_batch are both set to the count (node-llama-cpp's `threads` context option).
import fs from "node:fs";
import path from "node:path";
import {GgmlType, LlamaLogLevel} from "node-llama-cpp";
import {fail, loadLlama, loadModel, parseArgs, parsePositiveInt, peerVersions} from "./common.mjs";

const usage = `usage: node bench/peer/bench_llama_cpp.mjs --model FILE.gguf [options]
  --prompt-tokens N         prefill prompt length (default 512)
  --gen-tokens N            decoded tokens per rep (default 128)
  --decode-prompt-tokens N  untimed prompt before decoding (default 16)
  --reps N                  timed reps per thread count; the median is reported (default 5)
  --threads LIST            comma-separated thread counts (default 1,2)
  --flash-attn auto|on|off  llama.cpp flash attention (default auto, llama.cpp's default)
  --seed N                  seed of the random prompt token ids (default 1234)
  --json                    print the JSON result on stdout and the table on stderr
`;

const args = parseArgs(process.argv.slice(2), {
    "model": "string", "prompt-tokens": "string", "gen-tokens": "string",
    "decode-prompt-tokens": "string", "reps": "string", "threads": "string",
    "flash-attn": "string", "seed": "string", "json": "boolean",
}, usage);
if (args.model == null)
    fail(`--model is required\n${usage}`);
const promptTokens = parsePositiveInt("prompt-tokens", args["prompt-tokens"] ?? "512");
const genTokens = parsePositiveInt("gen-tokens", args["gen-tokens"] ?? "128");
const decodePromptTokens = parsePositiveInt("decode-prompt-tokens", args["decode-prompt-tokens"] ?? "16");
const reps = parsePositiveInt("reps", args.reps ?? "5");
const seed = parsePositiveInt("seed", args.seed ?? "1234");
const threadCounts = (args.threads ?? "1,2").split(",").map((t) => parsePositiveInt("threads", t.trim()));
const flashAttention = {auto: "auto", on: true, off: false}[args["flash-attn"] ?? "auto"];
if (flashAttention === undefined)
    fail("--flash-attn must be auto, on or off");
const warmupDecodeSteps = Math.min(8, genTokens);

// llama.cpp log lines: the perf counters are collected, warnings and errors go to stderr.
const perfLines = [];
function onLog(level, message) {
    const text = message.trimEnd();
    if (text.startsWith("llama_perf_context_print:"))
        perfLines.push(text);
    else if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal || level === LlamaLogLevel.warn)
        process.stderr.write(`[llama.cpp ${level}] ${text}\n`);
}

// Prints and resets the context's llama_perf counters, and returns them:
// prompt = multi-token llama_decode calls, eval = single-token ones.
async function takePerf(context) {
    perfLines.length = 0;
    await context.printTimings();
    const deadline = Date.now() + 5000;
    while (!perfLines.some((l) => /\btotal time =/.test(l))) {
        if (Date.now() > deadline)
            throw new Error(`llama.cpp perf counters were not printed; got: ${JSON.stringify(perfLines)}`);
        await new Promise((resolve) => setTimeout(resolve, 1));
    }
    const find = (re) => {
        for (const line of perfLines) {
            const m = re.exec(line);
            if (m != null)
                return {ms: Number(m[1]), count: Number(m[2])};
        }
        throw new Error(`cannot parse llama.cpp perf counters: ${JSON.stringify(perfLines)}`);
    };
    return {
        prompt: find(/prompt eval time =\s*([0-9.]+) ms \/\s*(\d+) tokens/),
        eval: find(/:\s+eval time =\s*([0-9.]+) ms \/\s*(\d+) runs/),
    };
}

// mulberry32: a small seeded PRNG, so the prompt ids are the same on every run.
function makeRng(s) {
    let a = s >>> 0;
    return () => {
        a = (a + 0x6D2B79F5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

function vocabSize(model) {
    const tensors = model.fileInfo.fullTensorInfo ?? model.fileInfo.tensorInfo ?? [];
    const embd = tensors.find((t) => t.name === "token_embd.weight");
    if (embd != null)
        return Number(embd.dimensions[1]);
    const tokens = model.fileInfo.metadata?.tokenizer?.ggml?.tokens;
    if (tokens != null && tokens.length > 0)
        return tokens.length;
    throw new Error("cannot tell the vocabulary size (no token_embd.weight tensor, no tokenizer.ggml.tokens)");
}

function median(values) {
    const s = [...values].sort((a, b) => a - b);
    const mid = Math.floor(s.length / 2);
    return s.length % 2 === 1 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

const nsToMs = (ns) => Number(ns) / 1e6;

async function newContext(model, threads) {
    const context = await model.createContext({
        sequences: 1,
        contextSize: Math.max(promptTokens, decodePromptTokens) + genTokens + 1,
        batchSize: Math.max(promptTokens, decodePromptTokens),
        threads: {ideal: threads, min: threads},
        flashAttention,
        performanceTracking: true,
    });
    if (context.currentThreads !== threads)
        throw new Error(`asked llama.cpp for ${threads} threads, the context has ${context.currentThreads}`);
    return context;
}

// Evaluates `tokens` as one batch; returns the greedy next token and the JS wall time (ms).
async function evalGreedy(sequence, tokens) {
    const items = tokens.map((t, i) => (i === tokens.length - 1
        ? [t, {generateNext: {token: true, options: {temperature: 0}}}]
        : t));
    const t0 = process.hrtime.bigint();
    const out = await sequence.controlledEvaluate(items);
    const wallMs = nsToMs(process.hrtime.bigint() - t0);
    const next = out[tokens.length - 1]?.next?.token;
    if (next == null)
        throw new Error("llama.cpp returned no next token");
    return {next, wallMs};
}

async function prefillRep(model, threads, prompt) {
    const context = await newContext(model, threads);
    try {
        const sequence = context.getSequence();
        await takePerf(context); // reset the counters
        const {wallMs} = await evalGreedy(sequence, prompt);
        const perf = await takePerf(context);
        if (perf.prompt.count !== prompt.length)
            throw new Error(`llama.cpp counted ${perf.prompt.count} prompt tokens, expected ${prompt.length}`);
        return {ms: perf.prompt.ms, wallMs};
    } finally {
        await context.dispose();
    }
}

async function decodeRep(model, threads, prompt, steps) {
    const context = await newContext(model, threads);
    try {
        const sequence = context.getSequence();
        let {next} = await evalGreedy(sequence, prompt);
        await takePerf(context); // the prompt is not timed
        let wallMs = 0;
        for (let i = 0; i < steps; i++) {
            const r = await evalGreedy(sequence, [next]);
            next = r.next;
            wallMs += r.wallMs;
        }
        const perf = await takePerf(context);
        // (llama.cpp prints a count of 0 as 1, so the prompt-token count cannot be checked here.)
        if (perf.eval.count !== steps)
            throw new Error(`llama.cpp counted ${perf.eval.count} single-token evals, expected ${steps}`);
        if (context.currentThreads !== threads)
            throw new Error(`llama.cpp ran with ${context.currentThreads} threads, expected ${threads}`);
        return {ms: perf.eval.ms, wallMs};
    } finally {
        await context.dispose();
    }
}

const llama = await loadLlama({onLog, logLevel: LlamaLogLevel.info});
const model = await loadModel(llama, args.model);
const nVocab = vocabSize(model);
const rng = makeRng(seed);
const randomTokens = (n) => Array.from({length: n}, () => Math.floor(rng() * nVocab));
const prefillPrompt = randomTokens(promptTokens);
const decodePrompt = randomTokens(decodePromptTokens);

const perThreads = {};
for (const threads of threadCounts) {
    await prefillRep(model, threads, prefillPrompt); // warm-up
    await decodeRep(model, threads, decodePrompt, warmupDecodeSteps);
    const prefill = [];
    const decode = [];
    for (let r = 0; r < reps; r++) {
        prefill.push(await prefillRep(model, threads, prefillPrompt));
        decode.push(await decodeRep(model, threads, decodePrompt, genTokens));
    }
    const tps = (n, ms) => n / (ms / 1000);
    perThreads[threads] = {
        prefill_tps: median(prefill.map((x) => tps(promptTokens, x.ms))),
        decode_tps: median(decode.map((x) => tps(genTokens, x.ms))),
        prefill_tps_wall: median(prefill.map((x) => tps(promptTokens, x.wallMs))),
        decode_tps_wall: median(decode.map((x) => tps(genTokens, x.wallMs))),
        prefill_tps_reps: prefill.map((x) => tps(promptTokens, x.ms)),
        decode_tps_reps: decode.map((x) => tps(genTokens, x.ms)),
    };
}

const bestOf = (key) => {
    let best = null;
    for (const [threads, r] of Object.entries(perThreads))
        if (best == null || r[key] > best.tps)
            best = {tps: r[key], threads: Number(threads)};
    return best;
};
const bestPrefill = bestOf("prefill_tps");
const bestDecode = bestOf("decode_tps");
const result = {
    model: path.resolve(args.model),
    model_file_bytes: fs.statSync(args.model).size,
    model_tensor_bytes: model.fileInsights.modelSize,
    n_vocab: nVocab,
    prompt_tokens: promptTokens,
    gen_tokens: genTokens,
    decode_prompt_tokens: decodePromptTokens,
    reps,
    seed,
    statistic: "median",
    timing: "llama.cpp llama_perf_context counters (llama_decode + llama_synchronize only)",
    flash_attention: args["flash-attn"] ?? "auto",
    kv_cache_type: {key: GgmlType[model.defaultContextKvCacheKeyType], value: GgmlType[model.defaultContextKvCacheValueType]},
    use_mmap: model.useMmap,
    peer: await peerVersions(llama),
    threads: perThreads,
    best: {
        prefill_tps: bestPrefill.tps, prefill_threads: bestPrefill.threads,
        decode_tps: bestDecode.tps, decode_threads: bestDecode.threads,
    },
};

const fmt = (x) => x.toFixed(x >= 100 ? 1 : 2);
const v = result.peer;
const table = [
    `llama.cpp ${v.llama_cpp_release} via node-llama-cpp ${v.node_llama_cpp} (CPU, ${v.build_type}), ` +
    `${path.basename(args.model)}: prefill ${promptTokens} tokens, decode ${genTokens} tokens after ${decodePromptTokens}, ` +
    `median of ${reps} reps`,
    "",
    "| threads | prefill t/s | decode t/s | prefill t/s (JS wall) | decode t/s (JS wall) |",
    "|---:|---:|---:|---:|---:|",
    ...Object.entries(perThreads).map(([t, r]) =>
        `| ${t} | ${fmt(r.prefill_tps)} | ${fmt(r.decode_tps)} | ${fmt(r.prefill_tps_wall)} | ${fmt(r.decode_tps_wall)} |`),
    "",
].join("\n");
if (args.json) {
    process.stderr.write(table + "\n");
    process.stdout.write(JSON.stringify(result) + "\n");
} else {
    process.stdout.write(table + "\n");
}
await model.dispose();
await llama.dispose();
