#!/usr/bin/env python3
"""MLA prefill side by side: Pagoda (`pagoda bench -p N -n 0`) vs native llama.cpp
(`llama-bench -p N -n 0 -mmp 0`) on the same DeepSeek-V2-attention GGUF (dsv2-mini-q: 4
layers of V2-Lite's attention with V2's q LoRA, 16 heads, latent 512 + 64, dense FFN, f16 weights; written by
`pagoda make-model` when missing), f16 KV both, the same threads. Rounds alternate which engine
goes first; each engine is warmed up once. Prints the per-round prefill tokens/s and ratios and
the median (min-max) of the ratios as one JSON object. llama.cpp reads this file's attn_kv_b
(its non-MLA path: K and V expanded per head and cached so); Pagoda caches the latent row and
prefills in the expanded form, decompressing K and V per chunk (kernels/mla_attention.h).

  bench/peer/mla_prefill_rounds.py [--tokens 4096] [--rounds 5] [--threads 2] [--shape dsv2-mini-q]
  bench/peer/mla_prefill_rounds.py --decode 32 --tokens 4096 ...   decode tokens/s at depth --tokens
                                                                   (pagoda bench -d, llama-bench -d)

NATIVE_BIN: llama.cpp's binaries (default /work/cache/llama.cpp/build-avx2/bin), BUILD_DIR
Pagoda's build (default build), MODEL_DIR where the file goes (default /work/cache/models).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out.stdout


def pagoda_tps(pagoda, model, n, threads, decode=0):
    if decode > 0:
        j = json.loads(run([pagoda, "bench", "-m", model, "-p", "0", "-n", str(decode), "-d", str(n), "-t", str(threads),
                            "-c", str(n + decode + 16), "--isa", "avx2", "-r", "1", "--json", "-q"]))
        return float(j["decode_tps"])
    j = json.loads(run([pagoda, "bench", "-m", model, "-p", str(n), "-n", "0", "-t", str(threads), "-c", str(n + 16),
                        "--isa", "avx2", "-r", "1", "--json", "-q"]))
    return float(j["prefill_tps"])


def llama_tps(bench, model, n, threads, decode=0):
    work = ["-p", "0", "-n", str(decode), "-d", str(n)] if decode > 0 else ["-p", str(n), "-n", "0"]
    rows = json.loads(run([bench, "-m", model, *work, "-t", str(threads), "-mmp", "0", "-r", "1", "-o", "json"]))
    return float(rows[0]["avg_ts"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shape", default="dsv2-mini-q")
    ap.add_argument("--decode", type=int, default=0, help="decode this many tokens at depth --tokens instead of prefilling")
    a = ap.parse_args()
    native = os.environ.get("NATIVE_BIN", "/work/cache/llama.cpp/build-avx2/bin")
    pagoda = os.path.join(os.environ.get("BUILD_DIR", os.path.join(REPO, "build")), "bin", "pagoda")
    model_dir = os.environ.get("MODEL_DIR", "/work/cache/models")
    os.makedirs(model_dir, exist_ok=True)
    model = os.path.join(model_dir, f"{a.shape}-f16.gguf")
    if not os.path.exists(model):
        run([pagoda, "make-model", "--shape", a.shape, "--dtype", "f16", "-o", model])
    bench = os.path.join(native, "llama-bench")
    pagoda_tps(pagoda, model, 64, a.threads)  # warm-ups
    llama_tps(bench, model, 64, a.threads)
    rounds = []
    for r in range(a.rounds):
        if r % 2 == 0:
            p = pagoda_tps(pagoda, model, a.tokens, a.threads, a.decode)
            l = llama_tps(bench, model, a.tokens, a.threads, a.decode)
        else:
            l = llama_tps(bench, model, a.tokens, a.threads, a.decode)
            p = pagoda_tps(pagoda, model, a.tokens, a.threads, a.decode)
        rounds.append({"pagoda_tps": p, "llama_tps": l, "ratio": p / l})
        print(json.dumps(rounds[-1]), file=sys.stderr)
    ratios = [x["ratio"] for x in rounds]
    print(json.dumps({"model": model, "tokens": a.tokens, "decode": a.decode, "threads": a.threads, "rounds": rounds,
                      "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}))


if __name__ == "__main__":
    main()
