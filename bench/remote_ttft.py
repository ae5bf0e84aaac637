#!/usr/bin/env python3
"""Shared KV pool on Redis, end to end (issue 10, point 8): the time to first token of a prompt on a
second `pagoda serve` instance, cold (nobody had it) vs a Redis hit (only the first instance had
it), per --kv-remote-compress codec, for a 1,024-token and a 1,904-token prefix.

Per codec: one Redis (FLUSHALL first), instance A and instance B (separate processes, each its own
empty pool), both `--kv-remote URL --kv-remote-compress CODEC`. Each round, per length L, two
fresh random prompts P and Q of L + 1 tokens (L in whole 16-token blocks, plus one):
  A sends P             A computes it; write-through puts its blocks into Redis
  (wait until A's /metrics count L / 16 more acknowledged blocks)
  B cold                B sends Q (nobody had it): recompute
  B hit                 B sends P: its L tokens come from Redis
TTFT is the time from sending the request to the first streamed token. Prints per codec and
length the medians over the rounds, the ratio cold / hit, the bytes moved per prompt token
(B's read bytes / tokens loaded), the compression ratio (A's raw / wire bytes) and the codec's
CPU per block (A's compress, B's decompress).
  bench/remote_ttft.py --model GGUF --redis URL [--rounds 3] [--codecs none,lz4,zstd] [--threads 2]
"""
import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ttft(port, prompt):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"remote_ttft: {r.status} {r.read()!r}")
    first, cached = None, None
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: {"):
            if first is None:
                first = time.perf_counter() - start
            msg = json.loads(line[6:])
            if msg.get("usage"):
                cached = msg["usage"].get("prompt_tokens_details", {}).get("cached_tokens")
        if line.startswith(b"data: [DONE]"):
            break
    c.close()
    return first, cached


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def remote(m, name):
    return m.get(name + '{tier="remote"}', 0.0)


def start(args, codec):
    cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "-t", str(args.threads), "-c", "2048", "--quiet",
           "--no-dashboard", "--kv-remote", args.redis, "--kv-remote-compress", codec]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            return p, int(m.group(1))
    raise SystemExit("remote_ttft: a server did not start: " + " ".join(cmd))


def redis_cli(url, *args):
    m = re.match(r"redis://([^:/]+):(\d+)", url)
    subprocess.run(["redis-cli", "-h", m.group(1), "-p", m.group(2)] + list(args), check=True,
                   stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--redis", required=True, help="redis://HOST:PORT (FLUSHALL per codec)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--codecs", default="none,lz4,zstd")
    ap.add_argument("--lengths", default="1024,1904")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin/pagoda"))
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    rng = random.Random(10)
    fresh = lambda n: [1] + [rng.randrange(3, 500) for _ in range(n)]
    print("| codec | prefix tokens | B cold TTFT ms | B Redis-hit TTFT ms | cold ÷ hit | cached tokens | "
          "wire B/token | ratio | compress µs/block | decompress µs/block |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for codec in args.codecs.split(","):
        redis_cli(args.redis, "FLUSHALL")
        a, a_port = start(args, codec)
        b, b_port = start(args, codec)
        try:
            ttft(a_port, fresh(64))  # warm-up (threads, page faults), nothing shared
            ttft(b_port, fresh(64))
            for length in lengths:
                cold, hit, cached = [], [], []
                bytes_before = loaded_before = 0.0
                m0 = metrics(b_port)
                for _ in range(args.rounds):
                    p, q = fresh(length), fresh(length)
                    before = remote(metrics(a_port), "pagoda_kv_remote_written_blocks_total")
                    ttft(a_port, p)
                    deadline = time.time() + 120
                    while remote(metrics(a_port), "pagoda_kv_remote_written_blocks_total") < before + length // 16:
                        if time.time() > deadline:
                            raise SystemExit("remote_ttft: A's blocks never reached Redis")
                        time.sleep(0.01)
                    cold.append(ttft(b_port, q)[0])
                    t, c = ttft(b_port, p)
                    hit.append(t)
                    cached.append(c)
                # B publishes its /metrics at the end of a step; the last hit's loaded tokens
                # can lag its read bytes (an atomic of the tier): wait until they are in.
                hit_name = 'pagoda_kv_tier_hit_tokens_total{tier="remote"}'
                want = m0.get(hit_name, 0) + sum(cached)
                deadline = time.time() + 30
                m1 = metrics(b_port)
                while m1.get(hit_name, 0) < want and time.time() < deadline:
                    time.sleep(0.05)
                    m1 = metrics(b_port)
                ma = metrics(a_port)
                read = m1.get('pagoda_kv_tier_read_bytes_total{tier="remote"}', 0) - \
                    m0.get('pagoda_kv_tier_read_bytes_total{tier="remote"}', 0)
                tokens = m1.get('pagoda_kv_tier_hit_tokens_total{tier="remote"}', 0) - \
                    m0.get('pagoda_kv_tier_hit_tokens_total{tier="remote"}', 0)
                blocks_w = remote(ma, "pagoda_kv_remote_written_blocks_total")
                blocks_r = remote(m1, "pagoda_kv_remote_get_blocks_total")
                comp = remote(ma, "pagoda_kv_remote_compress_seconds_total") / max(1, blocks_w) * 1e6
                decomp = remote(m1, "pagoda_kv_remote_decompress_seconds_total") / max(1, blocks_r) * 1e6
                ratio = remote(ma, "pagoda_kv_remote_compression_ratio")
                mc, mh = statistics.median(cold) * 1000, statistics.median(hit) * 1000
                print(f"| {codec} | {length} | {mc:.1f} | {mh:.1f} | {mc / mh:.1f}× | {min(cached)} | "
                      f"{read / max(1, tokens):,.0f} | {ratio:.2f} | {comp:.0f} | {decomp:.0f} |", flush=True)
        finally:
            for p in (a, b):
                p.terminate()
                p.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
