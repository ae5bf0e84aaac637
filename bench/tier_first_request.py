#!/usr/bin/env python3
"""What a fresh instance gets from the tiers on its very first request (issue 26, points 5 and 6).

  --redis URL   shared pool: instance A serves prompt P (write-through into Redis), then a new
                instance B starts and its FIRST request is P: cached tokens and TTFT, against B's
                next request Q (a fresh prompt of the same length: recompute). A new B each round,
                so every hit is a first request decided before anything was measured at run time.
  --disk-dir D  restart: an instance with --kv-offload write-through --kv-disk-dir D serves P and
                gets SIGTERM as soon as the reply is in; a restarted instance on D serves P: cached
                tokens against P's full blocks, and the records the restart found.
Prints one table row per round and the medians.
  bench/tier_first_request.py --model GGUF (--redis URL | --disk-dir DIR) [--tokens 1106] [--rounds 3]
"""
import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from remote_ttft import metrics, redis_cli, remote, ttft  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(args, extra, log_path):
    cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "-t", str(args.threads), "-c", "2048",
           "--no-dashboard"] + extra
    log = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    for line in p.stdout:
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            return p, int(m.group(1))
    raise SystemExit("tier_first_request: a server did not start: " + " ".join(cmd) + " (log: " + log_path + ")")


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def redis_rounds(args, fresh):
    print("| round | B's first request: cached / prefix tokens | TTFT hit s | TTFT cold s | cold / hit |")
    print("|---|---|---|---|---|")
    extra = ["--kv-remote", args.redis]
    ratios, shares = [], []
    redis_cli(args.redis, "FLUSHALL")
    a, a_port = start(args, extra, "/tmp/tier_first_request.a.log")
    try:
        ttft(a_port, fresh(64))  # warm-up, nothing shared
        for r in range(args.rounds):
            p, q = fresh(args.tokens), fresh(args.tokens)
            before = remote(metrics(a_port), "pagoda_kv_remote_written_blocks_total")
            ttft(a_port, p)
            deadline = time.time() + 120
            while remote(metrics(a_port), "pagoda_kv_remote_written_blocks_total") < before + args.tokens // 16:
                if time.time() > deadline:
                    raise SystemExit("tier_first_request: A's blocks never reached Redis")
                time.sleep(0.01)
            b, b_port = start(args, extra, f"/tmp/tier_first_request.b{r}.log")
            try:
                hit, cached = ttft(b_port, p)
                cold, _ = ttft(b_port, q)
            finally:
                stop(b)
            prefix = args.tokens // 16 * 16
            ratios.append(cold / hit)
            shares.append(cached / prefix)
            print(f"| {r + 1} | {cached} / {prefix} | {hit:.3f} | {cold:.3f} | {cold / hit:.2f} |")
    finally:
        stop(a)
    print(f"\nmedian cached share {statistics.median(shares):.3f}, median cold / hit {statistics.median(ratios):.2f}")


def disk_rounds(args, fresh):
    print("| round | records found at restart | cached / full-block tokens |")
    print("|---|---|---|")
    extra = ["--kv-offload", "write-through", "--kv-disk-dir", args.disk_dir, "--kv-disk-mem", "2G"]
    shares = []
    for r in range(args.rounds):
        shutil.rmtree(args.disk_dir, ignore_errors=True)
        os.makedirs(args.disk_dir)
        p = fresh(args.tokens)
        s, port = start(args, extra, f"/tmp/tier_first_request.disk{r}.log")
        ttft(port, p)
        stop(s)  # at once: pending writes must drain before the exit
        s, port = start(args, extra, f"/tmp/tier_first_request.disk{r}.restart.log")
        try:
            _, cached = ttft(port, p)
        finally:
            stop(s)
        found = re.search(r"found (\d+) records", open(f"/tmp/tier_first_request.disk{r}.restart.log").read())
        full = args.tokens // 16 * 16
        shares.append(cached / full)
        print(f"| {r + 1} | {found.group(1) if found else '?'} | {cached} / {full} |")
    print(f"\nmedian cached share {statistics.median(shares):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--redis")
    ap.add_argument("--disk-dir")
    ap.add_argument("--tokens", type=int, default=1106)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin/pagoda"))
    args = ap.parse_args()
    if bool(args.redis) == bool(args.disk_dir):
        raise SystemExit("tier_first_request: give one of --redis URL and --disk-dir DIR")
    rng = random.Random(26)
    fresh = lambda n: [1] + [rng.randrange(3, 500) for _ in range(n)]
    (redis_rounds if args.redis else disk_rounds)(args, fresh)


if __name__ == "__main__":
    sys.exit(main())
