#!/usr/bin/env python3
"""Soak test: a loopback `pagoda serve` under a seeded, hostile mix of clients (issue 12, point 5).

The server runs stories260K with a KV pool small enough to force preemption and eviction. Clients
send a seeded mix: prompts built from shared prefixes (prefix-cache hits), random max_tokens,
n of 1-3, streaming and not, priorities, sampled requests, and clients that abort (hang up
mid-stream or before the answer). Checked continuously:
  - every greedy choice equals the single-request reference of its prompt (a prefix of it when
    cut by max_tokens; all of it when the model stopped);
  - every answer is 200, or a documented 429/503 with Retry-After; nothing else;
  - /metrics: blocks in use + cached + free == capacity.
At the end, after draining: zero requests running or waiting, zero blocks in use, and resident
memory within --max-rss-growth percent of its level after warm-up. Prints a summary line and exits
non-zero on any violation.
  bench/soak.py --minutes M [--seed S] [--clients C] [--bin build/bin/pagoda] [--model GGUF]
(The tiers, Redis and their faults are not wired into `pagoda serve` yet: not exercised here.)
"""
import argparse
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIXES = ["Once upon a time, there was a little girl named Lily.",
            "Tom and his dog went to the park to play with a red ball.",
            "One day, a big bird flew over the house."]
SUFFIXES = ["", " She", " He was very happy", " They", " The sun was", " Then"]


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        out[name] = float(value)
    return out


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def complete(port, body, timeout=120):
    """(status, headers, parsed JSON or None) of one non-streaming request."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = None
    return r.status, dict(r.getheaders()), parsed


def stream(port, body, abort_after=None, timeout=120):
    """(status, headers, {index: [text, finish]}) of one streaming request; with abort_after, hangs up
    after that many events (returns status 0)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), None
    choices, events = {}, 0
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            line = event.decode()
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            if payload == "[DONE]":
                c.close()
                return 200, {}, choices
            j = json.loads(payload)
            if "error" in j:
                c.close()
                return 500, {}, j
            for ch in j.get("choices", []):
                entry = choices.setdefault(ch["index"], ["", None])
                entry[0] += ch.get("text", "")
                if ch.get("finish_reason"):
                    entry[1] = ch["finish_reason"]
            events += 1
            if abort_after is not None and events >= abort_after:
                c.sock.close() if c.sock else None
                c.close()
                return 0, {}, None
    c.close()
    return -1, {}, choices  # ended without [DONE]


class Soak:
    def __init__(self, args, port, pid):
        self.args, self.port, self.pid = args, port, pid
        self.lock = threading.Lock()
        self.stats = {"requests": 0, "ok": 0, "refused": 0, "aborted": 0, "sampled": 0, "choices_checked": 0}
        self.errors = []
        self.references = {}

    def error(self, what):
        with self.lock:
            if len(self.errors) < 50:
                self.errors.append(what)

    def reference(self, prompt):
        status, _, j = complete(self.port, {"prompt": prompt, "max_tokens": 64, "temperature": 0})
        if status != 200:
            raise SystemExit(f"soak: reference request failed: {status} {j}")
        ch = j["choices"][0]
        return ch["text"], ch["finish_reason"]

    def check_choice(self, prompt, text, finish, max_tokens):
        ref_text, ref_finish = self.references[prompt]
        if finish == "length":  # cut by max_tokens: a prefix of the 64-token reference
            ok = ref_text.startswith(text) and (max_tokens < 64 or text == ref_text)
        else:  # the model stopped: exactly where the reference stopped
            ok = finish == "stop" and ref_finish == "stop" and text == ref_text
        if not ok:
            self.error(f"wrong tokens: prompt {prompt!r} max_tokens {max_tokens} finish {finish}: {text!r} vs {ref_text!r}")
        with self.lock:
            self.stats["choices_checked"] += 1

    def client(self, seed, deadline):
        rng = random.Random(seed)
        while time.time() < deadline:
            prompt = rng.choice(PREFIXES) + rng.choice(SUFFIXES)
            max_tokens = rng.choice([1, 2, 8, 16, 32, 64])
            n = rng.choice([1, 1, 2, 3])
            sampled = rng.random() < 0.15
            body = {"prompt": prompt, "max_tokens": max_tokens, "n": n, "priority": rng.randint(-2, 2),
                    "temperature": 0.8 if sampled else 0}
            if sampled:
                body["seed"] = rng.randint(0, 1 << 30)
            do_stream = rng.random() < 0.5
            abort = rng.random() < 0.12
            with self.lock:
                self.stats["requests"] += 1
            try:
                if abort and not do_stream:  # hang up before the answer
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
                    data = json.dumps(body)
                    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               f"Content-Length: {len(data)}\r\n\r\n{data}").encode())
                    time.sleep(rng.random() * 0.05)
                    s.close()
                    with self.lock:
                        self.stats["aborted"] += 1
                    continue
                if do_stream:
                    body["stream"] = True
                    status, headers, choices = stream(self.port, body, rng.randint(1, 6) if abort else None)
                    if status == 0:
                        with self.lock:
                            self.stats["aborted"] += 1
                        continue
                    results = [(v[0], v[1]) for _, v in sorted(choices.items())] if status == 200 else []
                else:
                    status, headers, j = complete(self.port, body)
                    results = [(c["text"], c["finish_reason"]) for c in j["choices"]] if status == 200 else []
            except (OSError, http.client.HTTPException) as e:
                self.error(f"connection error: {e!r}")
                continue
            if status in (429, 503):
                if headers.get("Retry-After") is None:
                    self.error(f"{status} without Retry-After")
                with self.lock:
                    self.stats["refused"] += 1
                time.sleep(0.01)
                continue
            if status != 200:
                self.error(f"status {status}")
                continue
            if len(results) != n:
                self.error(f"{len(results)} choices for n={n}")
            with self.lock:
                self.stats["ok"] += 1
                self.stats["sampled"] += sampled
            if not sampled:
                for text, finish in results:
                    self.check_choice(prompt, text, finish, max_tokens)

    def check_metrics(self, m):
        blocks = [m.get(f'pagoda_kv_blocks{{state="{s}"}}', 0) for s in ("in_use", "cached", "free")]
        if sum(blocks) != m.get("pagoda_kv_blocks_capacity", -1):
            self.error(f"blocks {blocks} do not add up to {m.get('pagoda_kv_blocks_capacity')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin/pagoda"))
    ap.add_argument("--model", default=os.path.join(os.environ.get("PAGODA_TEST_DATA", os.path.join(ROOT, "../shared")),
                                                    "models/stories260K/stories260K.gguf"))
    ap.add_argument("--kv-cache-mem", default="512K", help="small: forces preemption and eviction")
    ap.add_argument("--max-rss-growth", type=float, default=10.0, help="percent over the level after warm-up")
    args = ap.parse_args()

    cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "--kv-cache-mem", args.kv_cache_mem,
           "--max-num-seqs", "8", "--max-waiting", "16", "--quiet", "--no-dashboard"]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    lines = []
    for line in server.stdout:
        lines.append(line)
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        raise SystemExit("soak: the server did not start:\n" + "".join(lines))
    threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()
    try:
        soak = Soak(args, port, server.pid)
        for p in PREFIXES:
            for s in SUFFIXES:
                soak.references[p + s] = soak.reference(p + s)
        # Warm-up: a short burst of the mix, then the memory baseline.
        warm = [threading.Thread(target=soak.client, args=(args.seed * 1000 + i, time.time() + 10)) for i in range(args.clients)]
        [t.start() for t in warm]
        [t.join() for t in warm]
        rss_warm = rss_kb(server.pid)
        start = time.time()
        deadline = start + args.minutes * 60
        threads = [threading.Thread(target=soak.client, args=(args.seed * 7919 + i, deadline)) for i in range(args.clients)]
        [t.start() for t in threads]
        while any(t.is_alive() for t in threads):
            time.sleep(2)
            soak.check_metrics(metrics(port))
        [t.join() for t in threads]
        # Drained: nothing running or waiting, no block in use.
        for _ in range(600):
            m = metrics(port)
            if m.get("pagoda_requests_running", 1) == 0 and m.get("pagoda_requests_waiting", 1) == 0 and \
                    m.get('pagoda_kv_blocks{state="in_use"}', 1) == 0:
                break
            time.sleep(0.1)
        m = metrics(port)
        soak.check_metrics(m)
        in_use = m.get('pagoda_kv_blocks{state="in_use"}', -1)
        if in_use != 0 or m.get("pagoda_requests_running", -1) != 0 or m.get("pagoda_requests_waiting", -1) != 0:
            soak.error(f"not drained: {in_use} blocks in use, running {m.get('pagoda_requests_running')}, "
                       f"waiting {m.get('pagoda_requests_waiting')}")
        rss_end = rss_kb(server.pid)
        growth = 100.0 * (rss_end - rss_warm) / max(rss_warm, 1)
        if growth > args.max_rss_growth:
            soak.error(f"resident memory grew {growth:.1f}% ({rss_warm} -> {rss_end} KiB)")
        if server.poll() is not None:
            soak.error(f"the server exited with {server.returncode}")
        st = soak.stats
        server_aborts = m.get('pagoda_requests_finished_total{reason="abort"}', 0)
        print(f"soak: {args.minutes:g} min, seed {args.seed}: {st['requests']} requests, {st['ok']} served "
              f"({st['choices_checked']} greedy choices checked, {st['sampled']} sampled), {st['aborted']} aborted by "
              f"their clients, {st['refused']} refused (429/503), preemptions {m.get('pagoda_preemptions_total', 0):.0f}, "
              f"evicted blocks {m.get('pagoda_kv_evicted_blocks_total', 0):.0f}, aborts seen by the server "
              f"{server_aborts:.0f}, wrong tokens "
              f"{sum(1 for e in soak.errors if e.startswith('wrong'))}, leaked blocks {in_use:.0f}, "
              f"RSS {rss_warm} -> {rss_end} KiB ({growth:+.1f}%)")
        for e in soak.errors:
            print("soak: ERROR", e)
        return 1 if soak.errors else 0
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
