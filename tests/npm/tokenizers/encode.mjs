// Reference token ids from Hugging Face's JavaScript tokenizers (@huggingface/tokenizers, the
// tokenizer code of transformers.js), run offline on local files.
//
//   node encode.mjs TOKENIZER_DIR CORPUS.json          -> JSON array of id arrays on stdout
//   node encode.mjs TOKENIZER_DIR --bench TEXT_FILE    -> one JSON line: tokens, seconds, tokens/s
//
// TOKENIZER_DIR holds tokenizer.json (+ tokenizer_config.json). CORPUS.json is a JSON array of
// strings. Ids are the tokenizer's encoding without post-processing (add_special_tokens=false:
// no BOS/EOS); special-token text in the strings becomes those tokens, as in Hugging Face.
import { readFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

function fail(message) {
  process.stderr.write(`encode.mjs: ${message}\n`);
  process.exit(2);
}

const [dir, arg, benchFile] = process.argv.slice(2);
if (!dir || !arg) fail("usage: node encode.mjs TOKENIZER_DIR CORPUS.json | --bench TEXT_FILE");
const jsonPath = join(dir, "tokenizer.json");
if (!existsSync(jsonPath)) fail(`${jsonPath}: no such file`);
const configPath = join(dir, "tokenizer_config.json");
const config = existsSync(configPath) ? JSON.parse(readFileSync(configPath, "utf8")) : {};
const tokenizer = new Tokenizer(JSON.parse(readFileSync(jsonPath, "utf8")), config);
const encode = (text) => tokenizer.encode(text, { add_special_tokens: false }).ids;

if (arg === "--bench") {
  if (!benchFile) fail("--bench needs a text file");
  const text = readFileSync(benchFile, "utf8");
  encode(text.slice(0, 1000));  // warm up (regex compilation, caches are per word anyway)
  const start = process.hrtime.bigint();
  const n = encode(text).length;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(JSON.stringify({ bytes: Buffer.byteLength(text, "utf8"), tokens: n, seconds,
                               tokens_per_s: n / seconds }));
} else {
  const corpus = JSON.parse(readFileSync(arg, "utf8"));
  if (!Array.isArray(corpus)) fail(`${arg}: expected a JSON array of strings`);
  console.log(JSON.stringify(corpus.map((s) => encode(s))));
}
