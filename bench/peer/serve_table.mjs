#!/usr/bin/env node
// Prints the markdown tables of bench/serve_side_by_side.sh from the bench-serve JSON files it
// left in --dir. Missing files (a half that was not run, a failed run) show as "-".
import fs from "node:fs";
import path from "node:path";
import {fail, parseArgs} from "./args.mjs";

const usage = "usage: node bench/peer/serve_table.mjs --dir DIR [--concurrency 1,4,16,64] [--model NAME]\n";
const args = parseArgs(process.argv.slice(2), {dir: "string", concurrency: "string", model: "string"}, usage);
if (args.dir == null)
    fail(`--dir is required\n${usage}`);
const levels = (args.concurrency ?? "1,4,16,64").split(",").map((c) => c.trim());

// The rounds of a run: DIR/r1, DIR/r2, ... when bench/serve_side_by_side.sh ran --rounds, else DIR.
const roundDirs = (() => {
    const rounds = fs.readdirSync(args.dir).filter((d) => /^r\d+$/.test(d)).sort((x, y) => x.slice(1) - y.slice(1));
    return rounds.length > 0 ? rounds.map((d) => path.join(args.dir, d)) : [args.dir];
})();

function loadOne(dir, name) {
    const file = path.join(dir, name);
    if (!fs.existsSync(file))
        return null;
    try {
        const j = JSON.parse(fs.readFileSync(file, "utf8"));
        return j.summary?.succeeded > 0 ? j : null;
    } catch {
        return null;
    }
}
// Every round's run of `name` that succeeded at all.
const load = (name) => roundDirs.map((d) => loadOne(d, name)).filter((j) => j != null);
// " (k of N rounds)" when some round's run of `name` is missing or failed: the cell says what it has.
const rounds = (runs) => (runs.length < roundDirs.length ? ` (${runs.length} of ${roundDirs.length} rounds)` : "");
// The median over rounds of f(a) / f(b) with both from the same round, and its min-max: rounds
// in which either run is missing do not count (and the cell says how many did).
function paired(nameA, nameB, f) {
    const r = [];
    for (const d of roundDirs) {
        const a = loadOne(d, nameA), b = loadOne(d, nameB);
        if (a != null && b != null && f(b) > 0)
            r.push(f(a) / f(b));
    }
    if (r.length === 0)
        return "-";
    const m = median(r);
    const spread = r.length > 1 ? ` (${Math.min(...r).toFixed(2)}–${Math.max(...r).toFixed(2)})` : "";
    const count = r.length < roundDirs.length ? ` [${r.length} of ${roundDirs.length} rounds]` : "";
    return `${m.toFixed(2)}x${spread}${count}`;
}
function median(values) {
    const v = values.filter((x) => x != null && Number.isFinite(x)).sort((x, y) => x - y);
    if (v.length === 0)
        return null;
    return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
}
// The median over rounds of metric f.
const med = (runs, f) => median(runs.map(f));
const fmt = (x, digits = 1) => (x == null || !Number.isFinite(x) ? "-" : x.toFixed(digits));
const ratio = (a, b) => (a == null || b == null || b === 0 ? null : a / b);
const fmtRatio = (r) => (r == null ? "-" : `${r.toFixed(2)}x`);
// Every request asks for the same number of tokens (ignore_eos), and llama-server fails some
// random-weight replies only at their very end (its chat parser on a reply cut inside a UTF-8
// character), after generating all of them: failed requests count as full replies.
const tps1 = (j) => j.summary.output_tokens_per_s * j.summary.requests / j.summary.succeeded;
const tps = (runs) => med(runs, tps1);
const failed = (runs) => {
    const n = runs.reduce((sum, j) => sum + j.summary.failed, 0);
    return n > 0 ? ` (${n} failed)` : "";
};

const out = [];
out.push(`### Serving throughput${args.model ? ` (${args.model})` : ""}: output tokens/s, closed loop`);
out.push("");
out.push("| concurrency | Pagoda | Pagoda, 1 at a time | ratio | llama.cpp, 16 slots | llama.cpp, 1 slot | ratio | Pagoda / llama.cpp |");
out.push("|---:|---:|---:|---:|---:|---:|---:|---:|");
for (const c of levels) {
    const p = load(`pagoda-c${c}.json`), p1 = load(`pagoda-seq1-c${c}.json`);
    const l = load(`llama-s16-c${c}.json`), l1 = load(`llama-s1-c${c}.json`);
    out.push(`| ${c} | ${fmt(tps(p))}${failed(p)}${rounds(p)} | ${fmt(tps(p1))}${failed(p1)}${rounds(p1)} ` +
        `| ${paired(`pagoda-c${c}.json`, `pagoda-seq1-c${c}.json`, tps1)} ` +
        `| ${fmt(tps(l))}${failed(l)}${rounds(l)} | ${fmt(tps(l1))}${failed(l1)}${rounds(l1)} ` +
        `| ${paired(`llama-s16-c${c}.json`, `llama-s1-c${c}.json`, tps1)} ` +
        `| ${paired(`pagoda-c${c}.json`, `llama-s16-c${c}.json`, tps1)} |`);
}
out.push("");
out.push("### Multi-turn chat: prefix cache on vs off");
out.push("");
out.push("| server | TTFT p50 on / off (ms) | ratio off/on | TTFT p99 on / off (ms) | ratio off/on | hit rate on / off | output tok/s on / off |");
out.push("|---|---:|---:|---:|---:|---:|---:|");
for (const [name, prefix] of [["Pagoda", "pagoda"], ["llama.cpp", "llama"]]) {
    const on = load(`${prefix}-mt-on.json`), off = load(`${prefix}-mt-off.json`);
    const t = (runs, q) => med(runs, (j) => j.summary.ttft_ms[q]);
    const hit = (runs) => {
        const h = med(runs, (j) => j.summary.prefix_cache_hit_rate);
        return h == null ? "-" : `${(h * 100).toFixed(1)}%`;
    };
    const ttft = (q) => (j) => j.summary.ttft_ms[q];
    out.push(`| ${name} | ${fmt(t(on, "p50"))} / ${fmt(t(off, "p50"))}${rounds(on)} ` +
        `| ${paired(`${prefix}-mt-off.json`, `${prefix}-mt-on.json`, ttft("p50"))} ` +
        `| ${fmt(t(on, "p99"))} / ${fmt(t(off, "p99"))} | ${paired(`${prefix}-mt-off.json`, `${prefix}-mt-on.json`, ttft("p99"))} ` +
        `| ${hit(on)} / ${hit(off)} | ${fmt(tps(on))} / ${fmt(tps(off))} |`);
}
const any = [...load(`pagoda-c${levels[0]}.json`), ...load(`llama-s16-c${levels[0]}.json`)][0];
if (any != null) {
    const c = any.config;
    out.push("");
    out.push(`Random workload: prompts of ${c.prompt_len.join("-")} words, ${c.output_len.join("-")} output tokens ` +
        `(ignore_eos), seed ${c.seed - Number(levels[0])} + concurrency. Ratios: throughput over the one-at-a-time server at the same concurrency; ` +
        "multi-turn TTFT ratios are off/on (higher: the cache helps more). " +
        `Rates are medians of ${roundDirs.length} round(s); ratios are medians of the per-round ratios ` +
        "(min–max), each round pairing runs made back to back; a cell built from fewer rounds says so; " +
        `"failed": requests over all rounds (counted as full replies).`);
}
process.stdout.write(out.join("\n") + "\n");
