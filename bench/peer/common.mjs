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

// Argument helpers live in args.mjs (which does not load node-llama-cpp).
export {fail, parseArgs, parsePositiveInt} from "./args.mjs";
