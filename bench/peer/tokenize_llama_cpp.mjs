#!/usr/bin/env node
// Prints llama.cpp's token ids for test strings, in llama.cpp's test-tokenizer-0 format:
//   --inp FILE holds the strings, each followed by "\n__ggml_vocab_test__\n"
//   (split the way llama.cpp's tests/test-tokenizer-0.cpp splits its .inp files);
//   stdout gets one line per string: each id preceded by a single space.
// Tokenization is llama.cpp's common_tokenize(vocab, text, add_special=false,
// parse_special=false): no BOS/EOS, special-token text is tokenized as plain text.
// Used to make tests/data/tok512_encode.out (see tests/data/README.md).
import fs from "node:fs";
import {fail, loadLlama, loadModel, parseArgs} from "./common.mjs";

const usage = `usage: node bench/peer/tokenize_llama_cpp.mjs --model FILE.gguf --inp FILE.inp > FILE.out\n`;
const args = parseArgs(process.argv.slice(2), {"model": "string", "inp": "string"}, usage);
if (args.model == null || args.inp == null)
    fail(`--model and --inp are required\n${usage}`);

const separator = "\n__ggml_vocab_test__\n";
let rest = fs.readFileSync(args.inp, "utf8");
const texts = [];
for (let pos = rest.indexOf(separator); pos >= 0; pos = rest.indexOf(separator)) {
    texts.push(rest.slice(0, pos));
    rest = rest.slice(pos + separator.length);
}
if (rest.length > 0)
    process.stderr.write(`warning: ${rest.length} characters after the last separator are ignored (as llama.cpp does)\n`);

const llama = await loadLlama();
const model = await loadModel(llama, args.model);
let out = "";
for (const text of texts) {
    // model.tokenize(text, false) -> common_tokenize(vocab, text, false, false); "" -> [].
    const ids = model.tokenize(text, false);
    out += ids.map((id) => ` ${id}`).join("") + "\n";
}
process.stdout.write(out);
await model.dispose();
await llama.dispose();
