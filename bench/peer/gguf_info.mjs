#!/usr/bin/env node
// Prints one JSON object about a GGUF file: its size on disk and the bytes of its tensors
// (summed with ggml's type and block sizes, as llama.cpp counts them, without the header or
// alignment padding). bench/run_side_by_side.sh uses tensor_bytes as the weight bytes read per
// decoded token in the decode roofline.
//   node bench/peer/gguf_info.mjs FILE.gguf
import fs from "node:fs";
import path from "node:path";
import {GgufInsights, readGgufFileInfo} from "node-llama-cpp";
import {fail} from "./common.mjs";

const file = process.argv[2];
if (file == null || process.argv.length > 3)
    fail("usage: node bench/peer/gguf_info.mjs FILE.gguf");
if (!fs.existsSync(file))
    fail(`no such file: ${file}`);
const info = await readGgufFileInfo(path.resolve(file), {logWarnings: false});
const insights = await GgufInsights.from(info);
const tensors = info.fullTensorInfo ?? info.tensorInfo ?? [];
process.stdout.write(JSON.stringify({
    file: path.resolve(file),
    file_bytes: fs.statSync(file).size,
    tensor_bytes: insights.modelSize,
    n_tensors: tensors.length,
    architecture: info.metadata?.general?.architecture ?? null,
    file_type: info.metadata?.general?.file_type ?? null,
}) + "\n");
