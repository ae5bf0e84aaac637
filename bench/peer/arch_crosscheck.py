#!/usr/bin/env python3
"""Cross-check of every architecture Pagoda runs against native llama.cpp.

The same random-weight GGUF (f32 weights; output_norm scaled up so that next-token
distributions are peaked; gemma3 untied so that greedy runs do not repeat one token) must give
the same greedy tokens in Pagoda and in llama-server (built by bench/peer/build_native.sh).
Pagoda generates N tokens greedily (`pagoda run --json`); then llama-server is asked, for the
prompt and each prefix of Pagoda's tokens (one request per step, token-id prompts, its prompt
cache on), for its own argmax. Every step equal means llama.cpp's greedy run is the same
sequence. Not a CI test: it needs the native build and a minute or two of CPU.

llama-server answers 500 when the text of a generated token is not valid UTF-8 (a lone byte
token <0x80>..<0xFF> of the synthetic vocabulary), so those 128 ids are banned on its side
(logit_bias); a step where Pagoda's own token is one of them cannot be checked and is counted
as such. Banning tokens does not change the order of the others, so every other step is exact.

  bench/peer/arch_crosscheck.py [--models SHAPE:TYPE,...] [-n N] [--repeat K] [--logit-scale X]

Default models (model_factory.h): xc-llama, xc-qwen3, xc-mla (deepseek2: q LoRA, YaRN),
xc-gemma3 (windows of 64 on two layers in three), gemma3-270m (window 512), all f32. The prompt
is a sentence repeated --repeat times (default 16: about 580 tokens, past every window), halved
until it fits the model's context. --kv f16 (default) or f32: the KV cache dtype of both.

Verdicts: SAME (every checked step equal), AGREE (the steps that differ are near-ties: llama.cpp's
own probabilities of its top token and of Pagoda's differ by less than 1%, rounding's reach),
DIFFER (exit status 1). NATIVE_BIN names
llama.cpp's binaries (default /work/cache/llama.cpp/build-avx2/bin, else
bench/peer/native/build/bin), BUILD_DIR Pagoda's build, MODEL_DIR where files go.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SENTENCE = "Once upon a time there was a little girl named Lily who loved to play outside in the park. "
NEAR_TIE = 0.01  # a step where llama.cpp's top token beats Pagoda's by less than 1% in probability
HIGH_BYTE_IDS = range(3 + 0x80, 3 + 0x100)  # model_factory.h's synthetic vocab: <unk> <s> </s> then bytes


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def start_server(binary, model, port, ctx, kv, log):
    proc = subprocess.Popen([binary, "-m", model, "--no-mmap", "-t", "2", "-c", str(ctx), "-np", "1", "-ctk", kv,
                             "-ctv", kv, "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=log)
    for _ in range(600):
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit(f"arch_crosscheck: llama-server did not start on {model} (log: {log.name})")


def pagoda_greedy(pagoda, model, n, repeat, kv):
    for reps in [repeat // (1 << k) for k in range(8) if repeat // (1 << k) > 0]:
        r = subprocess.run([pagoda, "run", "-m", model, "-p", SENTENCE * reps, "-n", str(n), "--temp", "0",
                            "--ignore-eos", "--json", "--kv-dtype", kv], capture_output=True, text=True)
        if r.returncode == 0:
            o = json.loads(r.stdout)
            return o["prompt_token_ids"], o["token_ids"]
    sys.exit(f"arch_crosscheck: pagoda run failed on {model}: {r.stderr.strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="xc-llama:f32,xc-qwen3:f32,xc-mla:f32,xc-gemma3:f32,gemma3-270m:f32,xc-qwen3moe:f32")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=16)
    ap.add_argument("--logit-scale", type=float, default=3.0)
    ap.add_argument("--port", type=int, default=18571)
    ap.add_argument("--kv", choices=["f16", "f32"], default="f16", help="KV cache dtype on both sides")
    a = ap.parse_args()
    native = os.environ.get("NATIVE_BIN") or next(
        (d for d in ["/work/cache/llama.cpp/build-avx2/bin", f"{REPO}/bench/peer/native/build/bin"]
         if os.access(f"{d}/llama-server", os.X_OK)), "")
    server = f"{native}/llama-server"
    pagoda = f"{os.environ.get('BUILD_DIR', REPO + '/build')}/bin/pagoda"
    model_dir = os.environ.get("MODEL_DIR", "/tmp/pagoda-crosscheck")
    if not os.access(server, os.X_OK):
        sys.exit("arch_crosscheck: llama-server not found: run bench/peer/build_native.sh (or set NATIVE_BIN)")
    if not os.access(pagoda, os.X_OK):
        sys.exit(f"arch_crosscheck: {pagoda} not found: build Pagoda first")
    os.makedirs(model_dir, exist_ok=True)
    ban = [[i, False] for i in HIGH_BYTE_IDS]
    failed = False
    for spec in a.models.split(","):
        shape, dtype = spec.split(":")
        path = f"{model_dir}/{shape}-{dtype}-x{a.logit_scale:g}.gguf"
        if not os.path.exists(path):
            subprocess.run([pagoda, "make-model", "--shape", shape, "--dtype", dtype, "--logit-scale",
                            str(a.logit_scale), "--untied-output", "-q", "-o", path + ".tmp"], check=True,
                           stdout=subprocess.DEVNULL)
            os.replace(path + ".tmp", path)
        prompt, ours = pagoda_greedy(pagoda, path, a.n, a.repeat, a.kv)
        with open(f"{model_dir}/llama-server.log", "w") as log:
            proc = start_server(server, path, a.port, len(prompt) + a.n + 64, a.kv, log)
            try:
                agree, unchecked, worst_gap, first_diff = 0, 0, 0.0, None
                for i, tok in enumerate(ours):
                    if tok in HIGH_BYTE_IDS:
                        unchecked += 1
                        continue
                    o = post(a.port, {"prompt": prompt + ours[:i], "n_predict": 1, "temperature": 0,
                                      "ignore_eos": True, "return_tokens": True, "cache_prompt": True,
                                      "n_probs": 5, "logit_bias": ban})
                    theirs = o["tokens"][0]
                    if theirs == tok:
                        agree += 1
                        continue
                    first_diff = i if first_diff is None else first_diff
                    top = {p["id"]: math.exp(p["logprob"]) for p in o["completion_probabilities"][0]["top_logprobs"]}
                    p_top = top.get(theirs, 0.0)
                    gap = (p_top - top.get(tok, 0.0)) / p_top if p_top > 0 else 1.0
                    worst_gap = max(worst_gap, gap)
            finally:
                proc.terminate()
                proc.wait()
        checked = len(ours) - unchecked
        verdict = "SAME  " if agree == checked else "AGREE " if worst_gap < NEAR_TIE else "DIFFER"
        failed |= verdict == "DIFFER"
        note = f", {unchecked} unchecked (byte tokens)" if unchecked else ""
        extra = "" if first_diff is None else f"; first at step {first_diff}, largest relative probability gap {worst_gap:.3g}"
        print(f"{verdict}  {shape}:{dtype}  prompt {len(prompt)} tokens: llama.cpp's argmax equals Pagoda's greedy "
              f"token at {agree}/{checked} steps{note}{extra}")
        print(f"        pagoda: {','.join(map(str, ours))}")
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
