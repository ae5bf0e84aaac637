// Shared helpers for the llama.cpp (node-llama-cpp) peer scripts.
//
// Every script here loads llama.cpp the same way: the prebuilt CPU binary that ships in the
// node-llama-cpp npm package (never a source build, never a GPU backend), with the model read
// into anonymous memory (useMmap: false; mapped pages get reclaimed on the bench machines,
// which halves llama.cpp's decode speed).
import fs from "node:fs";
import path from "node:path";
import {getLlama, getModuleVersion, LlamaLogLevel} from "node-llama-cpp";

// The pinned node-llama-cpp version and the llama.cpp release its prebuilt binaries were built from.
export async function peerVersions(llama) {
    return {
        node_llama_cpp: await getModuleVersion(),
        llama_cpp_repo: llama.llamaCppRelease?.repo ?? null,
        llama_cpp_release: llama.llamaCppRelease?.release ?? null,
        build_type: llama.buildType,
        gpu: llama.gpu,
        system_info: llama.systemInfo?.trim() ?? null,
    };
}

// Loads llama.cpp (CPU, prebuilt only). `onLog(level, message)` receives every llama.cpp log
// line at `logLevel` or above. maxThreads: 0 tells node-llama-cpp not to share out threads
// between contexts, so a context's `threads` option is the exact thread count llama.cpp uses.
export async function loadLlama({onLog, logLevel = LlamaLogLevel.warn} = {}) {
    return await getLlama({
        gpu: false,
        build: "never",
        maxThreads: 0,
        logLevel,
        logger: onLog ?? ((level, message) => process.stderr.write(`[llama.cpp ${level}] ${message}\n`)),
        progressLogs: false,
    });
}

export async function loadModel(llama, modelPath) {
    if (!fs.existsSync(modelPath))
        throw new Error(`model file not found: ${modelPath}`);
    return await llama.loadModel({modelPath: path.resolve(modelPath), useMmap: false, gpuLayers: 0});
}

// Minimal `--name value` / `--flag` parser. `spec` maps option names to "string" | "boolean".
export function parseArgs(argv, spec, usage) {
    const out = {};
    for (let i = 0; i < argv.length; i++) {
        const arg = argv[i];
        if (arg === "-h" || arg === "--help") {
            process.stdout.write(usage);
            process.exit(0);
        }
        const m = /^--([a-z0-9-]+)(?:=(.*))?$/.exec(arg);
        if (m == null || !(m[1] in spec))
            fail(`unknown argument: ${arg}\n${usage}`);
        const name = m[1];
        if (spec[name] === "boolean") {
            if (m[2] != null)
                fail(`--${name} takes no value`);
            out[name] = true;
        } else {
            const value = m[2] ?? argv[++i];
            if (value == null)
                fail(`--${name} needs a value`);
            out[name] = value;
        }
    }
    return out;
}

export function fail(message) {
    process.stderr.write(`error: ${message}\n`);
    process.exit(2);
}

export function parsePositiveInt(name, value) {
    const n = Number(value);
    if (!Number.isInteger(n) || n <= 0)
        fail(`--${name} must be a positive integer, got "${value}"`);
    return n;
}
