// Reference pre-tokenizer splits from Hugging Face's JavaScript tokenizers: a Sequence of
// Split(Regex, Isolated) steps, as tokenizer.json files and llama.cpp's regex lists describe.
//
//   node pretokenize.mjs REGEXES.json CORPUS.json  -> JSON array (per string) of piece arrays
//
// REGEXES.json is a JSON array of regex strings (Oniguruma syntax, as in tokenizer.json).
import { readFileSync } from "node:fs";
import { SequencePreTokenizer } from "@huggingface/tokenizers";

const [regexFile, corpusFile] = process.argv.slice(2);
if (!regexFile || !corpusFile) {
  process.stderr.write("usage: node pretokenize.mjs REGEXES.json CORPUS.json\n");
  process.exit(2);
}
const regexes = JSON.parse(readFileSync(regexFile, "utf8"));
const pre = new SequencePreTokenizer({
  type: "Sequence",
  pretokenizers: regexes.map((r) => ({ type: "Split", pattern: { Regex: r }, behavior: "Isolated", invert: false })),
});
const corpus = JSON.parse(readFileSync(corpusFile, "utf8"));
console.log(JSON.stringify(corpus.map((s) => pre.pre_tokenize(s))));
