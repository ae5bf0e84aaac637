#!/usr/bin/env python3
"""Decode throughput of constrained vs unconstrained requests through `pagoda serve`.

Starts `pagoda serve -m MODEL` and runs ROUNDS rounds; each round runs both workloads, in
alternating order: N concurrent chat requests with a 20-property JSON schema
(response_format json_schema, temperature 1) and the same N requests unconstrained
(ignore_eos, so they decode max_tokens). A workload's decode rate is its completion tokens /
the time from its first to its last token. Prints each round, the median of the paired
per-round ratios (constrained / unconstrained) with min-max.
With --peer-bin (native llama-server), the peer serves the same file (-np N, --no-mmap) and each
round also runs the constrained workload through its json_schema support, in alternating
order with Pagoda's: the paired ratio Pagoda / llama-server of constrained decode rates.
  python3 bench/structured_serve.py --model /work/models/llama-110m-f16.gguf [--threads 2] \
      [--peer-bin /work/cache/llama.cpp/build-avx2/bin/llama-server]"""
import argparse
import json
import os
import re
import statistics
import subprocess
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def schema():
    props, types = {}, ["string", "integer", "number", "boolean"]
    for i in range(20):
        p = {"type": types[i % 4]}
        if i % 4 == 0:
            p["maxLength"] = 24
        if i % 5 == 4:
            p = {"enum": ["red", "green", "blue"]}
        props[f"field_{i}"] = p
    return {"type": "object", "properties": props, "required": [f"field_{i}" for i in range(0, 20, 2)]}


def start(cmd, pattern):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        m = re.search(pattern, line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # keep draining
            return proc, int(m.group(1)) if m.groups() and m.group(1).isdigit() else None
    raise SystemExit("structured_serve: a server did not start: " + " ".join(cmd))


def wait_ready(port):
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.2)
    raise SystemExit("structured_serve: the peer never became ready")


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def workload(port, n, max_tokens, constrained, seed):
    out = [None] * n
    def one(i):
        body = {"messages": [{"role": "user", "content": f"Describe item {i} as JSON."}], "max_tokens": max_tokens,
                "temperature": 1.0, "seed": seed + i}
        if constrained:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "item", "schema": schema()}}
        else:
            body["ignore_eos"] = True
        out[i] = post(port, body)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    tokens = sum(r["usage"]["completion_tokens"] for r in out)
    if constrained:
        for r in out:
            c = r["choices"][0]
            if c["finish_reason"] == "stop":
                json.loads(c["message"]["content"])  # every finished reply is JSON
    return tokens / elapsed, tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin/pagoda"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--peer-bin", default="")
    ap.add_argument("--peer-port", type=int, default=18599)
    args = ap.parse_args()
    server, port = start([args.bin, "serve", "-m", args.model, "--port", "0", "-t", str(args.threads), "--no-dashboard"],
                         r"http://127\.0\.0\.1:(\d+)")
    peer = None
    if args.peer_bin:
        peer, _ = start([args.peer_bin, "-m", args.model, "--port", str(args.peer_port), "-t", str(args.threads), "-np",
                         str(args.n), "-c", str(args.n * 512), "--no-mmap", "-ctk", "f16", "-ctv", "f16"],
                        r"(?i)(?:server is listening|listening on)")
        wait_ready(args.peer_port)
    try:
        workload(port, args.n, 16, True, 1)  # warm-up: both paths, the grammar compiled and its masks seen
        workload(port, args.n, 16, False, 1)
        if peer:
            workload(args.peer_port, args.n, 16, True, 1)
        ratios, peer_ratios = [], []
        for r in range(args.rounds):
            order = [True, False] if r % 2 == 0 else [False, True]
            rate = {}
            for constrained in order:
                rate[constrained] = workload(port, args.n, args.max_tokens, constrained, 100 * r)
            ratio = rate[True][0] / rate[False][0]
            ratios.append(ratio)
            line = (f"round {r}: constrained {rate[True][0]:.1f} tok/s ({rate[True][1]} tokens), unconstrained "
                    f"{rate[False][0]:.1f} tok/s ({rate[False][1]} tokens), ratio {ratio:.3f}")
            if peer:
                if r % 2 == 0:
                    mine = workload(port, args.n, args.max_tokens, True, 7 + r)
                    theirs = workload(args.peer_port, args.n, args.max_tokens, True, 7 + r)
                else:
                    theirs = workload(args.peer_port, args.n, args.max_tokens, True, 7 + r)
                    mine = workload(port, args.n, args.max_tokens, True, 7 + r)
                peer_ratios.append(mine[0] / theirs[0])
                line += (f"; constrained Pagoda {mine[0]:.1f} vs llama-server {theirs[0]:.1f} tok/s "
                         f"({theirs[1]} tokens), ratio {peer_ratios[-1]:.3f}")
            print(line, flush=True)
        print(f"constrained / unconstrained decode rate: median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {len(ratios)} rounds")
        if peer_ratios:
            print(f"constrained, Pagoda / llama-server: median {statistics.median(peer_ratios):.3f} "
                  f"(min {min(peer_ratios):.3f}, max {max(peer_ratios):.3f}) over {len(peer_ratios)} rounds")
    finally:
        server.terminate()
        if peer:
            peer.terminate()


if __name__ == "__main__":
    main()
