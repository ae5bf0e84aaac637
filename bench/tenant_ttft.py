#!/usr/bin/env python3
"""Tenant isolation, timing side (issue 12, point 4): with --salt-per-api-key, is tenant B's first
token on a prompt that only tenant A sent any faster than on a prompt nobody sent?

Starts `pagoda serve` (stories260K, two API keys, --salt-per-api-key) and, for each round, a fresh
long prompt P (about 400 tokens, so that prefill dominates the time to first token):
  A cold   A sends P (nobody had it)
  A warm   A sends P again (its own prefix-cache hit: the side channel would look like this)
  B        B sends P (only A had it)
  B fresh  B sends another fresh prompt of the same length
TTFT is the time from sending the request to the first streamed token. Prints the medians of each
and the ratios B / B-fresh (isolation: ~1) and A-warm / A-cold (what a hit looks like).
  bench/tenant_ttft.py [--rounds N] [--bin build/bin/pagoda] [--model GGUF] [--shared]
(--shared: without --salt-per-api-key, to show the side channel the flag closes.)
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
WORDS = "the a little girl boy dog cat bird tree house park ball red big happy sad sun day play run jump " \
        "mom dad friend sky blue green car toy box cake fish water apple flower garden school book".split()


def ttft(port, key, prompt):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True})
    start = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json", "Authorization": "Bearer " + key})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"tenant_ttft: {r.status} {r.read()!r}")
    first = None
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: {") and first is None:
            first = time.perf_counter() - start
        if line.startswith(b"data: [DONE]"):
            break
    c.close()
    return first


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin/pagoda"))
    ap.add_argument("--model", default=os.path.join(os.environ.get("PAGODA_TEST_DATA", os.path.join(ROOT, "../shared")),
                                                    "models/stories260K/stories260K.gguf"))
    ap.add_argument("--shared", action="store_true", help="no --salt-per-api-key (the side channel open)")
    args = ap.parse_args()
    cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "--api-key", "sk-a", "--api-key", "sk-b", "--quiet",
           "--no-dashboard"] + ([] if args.shared else ["--salt-per-api-key"])
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    for line in server.stdout:
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        raise SystemExit("tenant_ttft: the server did not start")
    rng = random.Random(12)
    fresh = lambda: "Once upon a time " + " ".join(rng.choice(WORDS) for _ in range(380))
    try:
        ttft(port, "sk-a", fresh())  # warm-up
        t = {"A cold": [], "A warm": [], "B": [], "B fresh": []}
        for _ in range(args.rounds):
            p = fresh()
            t["A cold"].append(ttft(port, "sk-a", p))
            t["A warm"].append(ttft(port, "sk-a", p))
            t["B"].append(ttft(port, "sk-b", p))
            t["B fresh"].append(ttft(port, "sk-b", fresh()))
        med = {k: statistics.median(v) * 1000 for k, v in t.items()}
        mode = "shared cache (no --salt-per-api-key)" if args.shared else "--salt-per-api-key"
        print(f"tenant_ttft: {mode}, {args.rounds} rounds, median TTFT ms: " +
              ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
        print(f"tenant_ttft: B / B fresh = {med['B'] / med['B fresh']:.3f}   A warm / A cold = "
              f"{med['A warm'] / med['A cold']:.3f}")
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
