#!/usr/bin/env python3
"""P/D disaggregation benchmark: decoding users' inter-token latency while long prompts keep
arriving, colocated (one `pagoda serve -t 2` on two cores) vs disaggregated (`serve --role
prefill -t 1` on core 0, `serve --role decode -t 1` on core 1, behind `pagoda router --prefill
--decode`), each pinned with taskset. The same load for both:

  - U decoding users, each streaming a short prompt with max_tokens T again and again (closed
    loop, ignore_eos), whose token gaps are the ITL samples;
  - every I seconds a long prompt (L words, a different one each time, so never cached) with
    max_tokens 1.

Prints one markdown table (medians over --runs runs of ITL p50/p99, the long prompts' TTFT, and
the decode worker's KV pull bandwidth from /v1/pd/stats).

  bench/pd_itl.py [--model FILE.gguf] [--runs 3] [--duration 30] [--users 4] [--long-words 250]
                  [--interval 1.0] [--ucx-tls tcp,self] [--port 18400]
Needs a Release build (BUILD_DIR, default build/), python3 only (standard library).
"""
import argparse, http.client, json, os, statistics, subprocess, sys, threading, time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGODA = os.path.join(os.environ.get("BUILD_DIR", os.path.join(REPO, "build")), "bin", "pagoda")
WORDS = ("time little girl named Lily loved play outside park one day saw big red ball wanted it was too high "
         "Tom dog ran tree cake boat kite hat bird sun happy sad friend mom dad home water").split()


def start(args, cpus):
    cmd = (["taskset", "-c", cpus] if cpus else []) + [PAGODA] + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    if ":" not in line:
        raise SystemExit("could not start: " + " ".join(cmd) + " -> " + line)
    port = int(line.rsplit(":", 1)[1].split()[0].strip("/"))
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    return p, port


def post(port, body, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    data = r.read()
    c.close()
    return json.loads(data) if r.status == 200 else {}


def stream_user(port, user, max_tokens, stop_at, gaps):
    n = 0
    while time.monotonic() < stop_at:
        body = {"prompt": "Once upon a time %s and %s" % (WORDS[user % len(WORDS)], WORDS[(user * 7 + n) % len(WORDS)]),
                "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
        n += 1
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        last = None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.monotonic()
            if last is not None and now < stop_at:
                gaps.append(now - last)
            last = now
        c.close()


def long_prompts(port, words, interval, stop_at, ttfts, long_tokens, seed):
    i = 0
    while time.monotonic() < stop_at:
        t0 = time.monotonic()
        text = " ".join(WORDS[(seed * 131 + i * 17 + k * (i + 3)) % len(WORDS)] for k in range(words))
        status, data = post(port, {"prompt": "%d %s" % (seed * 100000 + i, text), "max_tokens": 1, "temperature": 0})
        if status == 200:
            ttfts.append(time.monotonic() - t0)
            long_tokens.append(json.loads(data)["usage"]["prompt_tokens"])
        else:
            print("long prompt: HTTP %d %s" % (status, data[:200]), file=sys.stderr)
        i += 1
        time.sleep(max(0.0, interval - (time.monotonic() - t0)))


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def run_once(mode, a, seed):
    model = ["-m", a.model] if a.model else []  # default: the built-in model (random weights)
    base = model + ["-c", "2048", "--kv-cache-mem", a.kv_cache_mem, "--port", "0", "--no-dashboard"]
    procs = []
    try:
        if mode == "colocated":
            p, port = start(["serve"] + base + ["-t", "2"], "0,1")
            procs.append(p)
            target = decode_port = port
        else:
            tls = ["--ucx-tls", a.ucx_tls] + (["--ucx-net-devices", "lo"] if a.ucx_tls.startswith("tcp") else [])
            p, pport = start(["serve"] + base + ["-t", "1", "--role", "prefill"] + tls, "0")
            procs.append(p)
            d, decode_port = start(["serve"] + base + ["-t", "1", "--role", "decode"] + tls, "1")
            procs.append(d)
            r, target = start(["router"] + model + ["--port", "0", "--policy", "round-robin",
                               "--prefill", "http://127.0.0.1:%d" % pport, "--decode", "http://127.0.0.1:%d" % decode_port], "")
            procs.append(r)
            time.sleep(1.5)  # the router's first health check
        post(target, {"prompt": "warm up", "max_tokens": 2})
        stop_at = time.monotonic() + a.duration
        gaps, ttfts, long_tokens = [], [], []
        threads = [threading.Thread(target=stream_user, args=(target, u, a.max_tokens, stop_at, gaps)) for u in range(a.users)]
        threads.append(threading.Thread(target=long_prompts, args=(target, a.long_words, a.interval, stop_at, ttfts, long_tokens, seed)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = get(decode_port, "/v1/pd/stats")
        bw = stats.get("imported_bytes", 0) / stats["transfer_seconds"] if stats.get("transfer_seconds") else float("nan")
        return {"itl_p50": pct(gaps, 0.5), "itl_p99": pct(gaps, 0.99), "samples": len(gaps),
                "long_ttft_p50": pct(ttfts, 0.5), "long": len(ttfts), "long_tokens": pct(long_tokens, 0.5), "pull_gbps": bw * 1e-9,
                "fallbacks": stats.get("imports_fallback", 0), "pulls": stats.get("imports_ok", 0)}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="", help="GGUF file (default: the built-in model)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--long-words", type=int, default=250)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--kv-cache-mem", default="256M")
    ap.add_argument("--ucx-tls", default="tcp,self")
    a = ap.parse_args()
    results = {"colocated": [], "disaggregated": []}
    for run in range(a.runs):
        for mode in ("colocated", "disaggregated"):
            r = run_once(mode, a, run)
            print("run %d %s: %s" % (run, mode, json.dumps(r)), file=sys.stderr)
            results[mode].append(r)
    med = {m: {k: statistics.median([r[k] for r in rs]) for k in rs[0]} for m, rs in results.items()}
    c, d = med["colocated"], med["disaggregated"]
    print("| setup | ITL p50 ms | ITL p99 ms | ITL samples | long prompts (tokens) | long-prompt TTFT p50 s | KV pull GB/s | fallbacks |")
    print("|---|---|---|---|---|---|---|---|")
    print("| colocated (1 instance, -t 2, cores 0-1) | %.1f | %.1f | %d | %d (%d) | %.2f | - | - |" %
          (c["itl_p50"] * 1e3, c["itl_p99"] * 1e3, c["samples"], c["long"], c["long_tokens"], c["long_ttft_p50"]))
    print("| disaggregated (prefill core 0 + decode core 1, UCX_TLS=%s) | %.1f | %.1f | %d | %d (%d) | %.2f | %.2f | %d |" %
          (a.ucx_tls, d["itl_p50"] * 1e3, d["itl_p99"] * 1e3, d["samples"], d["long"], d["long_tokens"], d["long_ttft_p50"],
           d["pull_gbps"], d["fallbacks"]))
    print("\nITL p99 colocated / disaggregated: %.2fx (medians of %d runs)" % (c["itl_p99"] / d["itl_p99"], a.runs))


if __name__ == "__main__":
    main()
