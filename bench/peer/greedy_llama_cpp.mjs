#!/usr/bin/env node
// Greedy generation with llama.cpp (CPU, through node-llama-cpp) from given prompt token ids:
// prints {"prompt_token_ids": [...], "token_ids": [...]} on stdout. Used by
// bench/kquant_crosscheck.sh to compare llama.cpp's tokens with Pagoda's on the same file.
//   node bench/peer/greedy_llama_cpp.mjs --model FILE.gguf --prompt-ids 1,361,401 --n 16 [--threads N]
// The prompt is evaluated as one batch, then --n tokens are generated one at a time, each the
// argmax (temperature 0) of the previous step's logits; end-of-text tokens do not stop it.
// With --follow-ids A,B,... (another engine's greedy tokens) nothing is generated: prompt +
// those ids are evaluated as one batch (teacher forcing) and, per step, llama.cpp's own argmax
// and the relative probability gap (p_argmax - p_followed) / p_argmax are printed instead.
import {fail, loadLlama, loadModel, parseArgs, parsePositiveInt} from "./common.mjs";

const usage = "usage: node bench/peer/greedy_llama_cpp.mjs --model FILE.gguf --prompt-ids ID,ID,... --n N [--threads N]\n";
const args = parseArgs(process.argv.slice(2), {"model": "string", "prompt-ids": "string", "n": "string", "threads": "string",
    "follow-ids": "string"}, usage);
if (args.model == null || args["prompt-ids"] == null)
    fail(`--model and --prompt-ids are required\n${usage}`);
const promptIds = args["prompt-ids"].split(",").map((s) => Number(s.trim()));
if (promptIds.length === 0 || promptIds.some((id) => !Number.isInteger(id) || id < 0))
    fail(`--prompt-ids must be a comma-separated list of token ids, got "${args["prompt-ids"]}"`);
const n = parsePositiveInt("n", args.n ?? "16");
const threads = parsePositiveInt("threads", args.threads ?? "1");

const followIds = args["follow-ids"] == null ? null : args["follow-ids"].split(",").map((s) => Number(s.trim()));

const llama = await loadLlama();
const model = await loadModel(llama, args.model);
const context = await model.createContext({
    sequences: 1, contextSize: promptIds.length + n + (followIds?.length ?? 0) + 1,
    batchSize: promptIds.length + (followIds?.length ?? 0), threads: {ideal: threads, min: threads},
});
const sequence = context.getSequence();

// Evaluates `tokens` as one batch and returns the greedy token after the last one.
async function next(tokens) {
    const items = tokens.map((t, i) => (i === tokens.length - 1
        ? [t, {generateNext: {token: true, probabilities: true, options: {temperature: 0}}}]
        : t));
    const out = await sequence.controlledEvaluate(items);
    const token = out[tokens.length - 1]?.next?.token;
    if (token == null)
        throw new Error("llama.cpp returned no next token");
    const probs = out[tokens.length - 1]?.next?.probabilities;
    if (probs != null) {
        const top = [...probs.entries()].sort((a, b) => b[1] - a[1]).slice(0, 2);
        margins.push(top.length > 1 ? Number((top[0][1] - top[1][1]).toPrecision(3)) : 1);
        seconds.push(top.length > 1 ? top[1][0] : -1);
    }
    return token;
}

if (followIds != null) {
    // Position promptIds.length - 1 + i predicts followIds[i].
    const all = [...promptIds, ...followIds];
    const first = promptIds.length - 1;
    const items = all.map((t, k) => (k >= first && k < all.length - 1
        ? [t, {generateNext: {probabilities: true, options: {temperature: 0}}}] : t));
    const out = await sequence.controlledEvaluate(items);
    const argmax = [], gaps = [];
    for (let i = 0; i < followIds.length; i++) {
        const probs = out[first + i]?.next?.probabilities;
        if (probs == null)
            throw new Error(`no probabilities at step ${i}`);
        let best = -1, bestP = -1;
        for (const [tok, p] of probs) if (p > bestP) { best = tok; bestP = p; }
        argmax.push(best);
        gaps.push(Number(((bestP - (probs.get(followIds[i]) ?? 0)) / bestP).toPrecision(3)));
    }
    process.stdout.write(JSON.stringify({prompt_token_ids: promptIds, followed_ids: followIds, argmax_ids: argmax,
        relative_gaps: gaps}) + "\n");
    process.exit(0);
}

const generated = [];
const margins = [];  // per step: probability of the top token minus that of the runner-up
const seconds = [];  // per step: the runner-up token
let token = await next(promptIds);
generated.push(token);
while (generated.length < n) {
    token = await next([token]);
    generated.push(token);
}
process.stdout.write(JSON.stringify({prompt_token_ids: promptIds, token_ids: generated, top2_margins: margins,
    runner_up_ids: seconds}) + "\n");
await context.dispose();
await model.dispose();
