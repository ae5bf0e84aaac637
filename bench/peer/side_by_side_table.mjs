#!/usr/bin/env node
// Prints the BENCHMARKS.md table from the result files bench/run_side_by_side.sh leaves in one
// folder (it can be re-run on a saved folder: bench/run_side_by_side.sh --table-only DIR).
//
// Files read, for each model KEY = SHAPE-DTYPE:
//   KEY.gguf.json       bench/peer/gguf_info.mjs:     {file_bytes, tensor_bytes}
//   KEY.pagoda.json     `pagoda bench ... --json`:   {prefill_tps, decode_tps} (the last JSON
//                                                     object line of its stdout is used)
//   KEY.llama_cpp.json  bench/peer/bench_llama_cpp.mjs --json: {best: {prefill_tps, decode_tps}}
// and membw.json (build/bin/membw_bench --json: {read_gbps_best}) and meta.json (settings).
// A missing or unreadable file shows as "n/a" in its cells; the exit status is then 1.
//
// decode roofline (t/s) = memory read bandwidth / bytes read per decoded token, with the file's
// tensor bytes as the bytes read per token (every weight read once per token; KV-cache reads
// are left out, and an untied token_embd, of which a token reads one row, is counted whole).
//   node bench/peer/side_by_side_table.mjs --dir DIR --models llama-110m:f32,llama-110m:f16
import fs from "node:fs";
import path from "node:path";
import {fail, parseArgs} from "./common.mjs";

const usage = "usage: node bench/peer/side_by_side_table.mjs --dir DIR --models SHAPE:DTYPE[,SHAPE:DTYPE...]\n";
const args = parseArgs(process.argv.slice(2), {"dir": "string", "models": "string"}, usage);
if (args.dir == null || args.models == null)
    fail(`--dir and --models are required\n${usage}`);

let missing = 0;
function readJson(name) {
    const file = path.join(args.dir, name);
    try {
        const text = fs.readFileSync(file, "utf8");
        try {
            return JSON.parse(text);
        } catch {
            // A tool that logs before its JSON: use the last line that is a JSON object.
            const lines = text.split("\n").map((l) => l.trim()).filter((l) => l.startsWith("{"));
            for (let i = lines.length - 1; i >= 0; i--) {
                try {
                    return JSON.parse(lines[i]);
                } catch { /* try the previous line */ }
            }
            throw new Error("no JSON object in it");
        }
    } catch (err) {
        process.stderr.write(`warning: ${file}: ${err.message}\n`);
        missing++;
        return null;
    }
}

const num = (x) => (typeof x === "number" && Number.isFinite(x) && x > 0 ? x : null);
const tps = (x) => (x == null ? "n/a" : x.toFixed(x >= 100 ? 1 : 2));
const ratio = (a, b) => (a == null || b == null ? "n/a" : `${(a / b).toFixed(2)}×`);
const pct = (a, b) => (a == null || b == null ? "n/a" : `${((100 * a) / b).toFixed(0)}%`);
function size(bytes) {
    if (bytes == null)
        return "n/a";
    const gib = bytes / 2 ** 30;
    return gib >= 1 ? `${gib.toFixed(2)} GiB` : `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

const meta = readJson("meta.json") ?? {};
const membw = readJson("membw.json");
const readGbps = num(membw?.read_gbps_best);

const rows = [];
let peerInfo = null; // the first llama.cpp result read: its version and settings go in the header
for (const spec of args.models.split(",").map((s) => s.trim()).filter((s) => s !== "")) {
    const [shape, dtype] = spec.split(":");
    if (shape == null || dtype == null)
        fail(`bad model "${spec}": expected SHAPE:DTYPE`);
    const key = `${shape}-${dtype}`;
    const gguf = readJson(`${key}.gguf.json`);
    const pagoda = readJson(`${key}.pagoda.json`);
    const peer = readJson(`${key}.llama_cpp.json`);
    peerInfo ??= peer;
    const tensorBytes = num(gguf?.tensor_bytes);
    const roofline = readGbps != null && tensorBytes != null ? (readGbps * 1e9) / tensorBytes : null;
    const p = {prefill: num(pagoda?.prefill_tps), decode: num(pagoda?.decode_tps)};
    const l = {prefill: num(peer?.best?.prefill_tps), decode: num(peer?.best?.decode_tps)};
    const lThreads = {prefill: peer?.best?.prefill_threads, decode: peer?.best?.decode_threads};
    const withThreads = (v, t) => (v == null || t == null ? tps(v) : `${tps(v)} (${t}t)`);
    rows.push([
        shape, dtype, size(num(gguf?.file_bytes)),
        tps(p.prefill), withThreads(l.prefill, lThreads.prefill), ratio(p.prefill, l.prefill),
        tps(p.decode), withThreads(l.decode, lThreads.decode), ratio(p.decode, l.decode),
        tps(roofline), pct(p.decode, roofline),
    ]);
}

const lines = [];
const settings = [];
if (meta.cpu != null)
    settings.push(`CPU: ${meta.cpu}${meta.nproc != null ? ` (${meta.nproc} cores)` : ""}`);
if (readGbps != null)
    settings.push(`memory read bandwidth ${readGbps.toFixed(1)} GB/s (membw_bench, median, best of its thread counts)`);
if (meta.pagoda_commit != null)
    settings.push(`Pagoda ${meta.pagoda_commit}, ${meta.pagoda_threads ?? "?"} threads`);
if (peerInfo?.peer != null)
    settings.push(`llama.cpp ${peerInfo.peer.llama_cpp_release} via node-llama-cpp ${peerInfo.peer.node_llama_cpp} ` +
        `(CPU, prebuilt, no mmap, KV ${peerInfo.kv_cache_type?.key ?? "?"}, flash attention ${peerInfo.flash_attention}), ` +
        `best of ${meta.peer_threads ?? "1,2"} threads`);
if (meta.prompt_tokens != null)
    settings.push(`prefill ${meta.prompt_tokens} tokens, decode ${meta.gen_tokens} tokens, median of ${meta.reps} reps`);
if (meta.date != null)
    settings.push(meta.date);
if (settings.length > 0)
    lines.push(settings.join("; ") + ".", "");
lines.push(
    "| model | dtype | file size | Pagoda prefill t/s | llama.cpp prefill t/s | ratio | " +
    "Pagoda decode t/s | llama.cpp decode t/s | ratio | decode roofline t/s | Pagoda % of roofline |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ...rows.map((r) => `| ${r.join(" | ")} |`),
    "",
    "ratio = Pagoda / llama.cpp (above 1: Pagoda is faster). llama.cpp's thread count is in brackets. " +
    "Decode roofline = memory read bandwidth / the file's tensor bytes (each weight read once per token; " +
    "KV-cache reads not counted).",
);
process.stdout.write(lines.join("\n") + "\n");
process.exit(missing > 0 ? 1 : 0);
