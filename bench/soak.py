#!/usr/bin/env python3
"""Soak test: a loopback `pagoda serve` under a seeded, hostile mix of clients (issue 12, point 5).

The server runs stories260K with a KV pool small enough to force preemption and eviction. Clients
send a seeded mix: prompts built from shared prefixes (prefix-cache hits), random max_tokens,
n of 1-3, streaming and not, priorities, sampled requests, and clients that abort (hang up
mid-stream or before the answer). Checked continuously:
  - every greedy choice equals the reference of its prompt (a prefix of it when cut by
    max_tokens; all of it when the model stopped). The references come from `pagoda run` on the
    same model file in a process of its own, not from the server under test; the server's own
    single-request answer must equal them too;
  - every answer is 200, or a documented 429/503 with Retry-After; nothing else;
  - /metrics: blocks in use + cached + free == capacity.
  - /metrics: every tier holds at most its capacity.
At the end, after draining: zero requests running or waiting, zero blocks in use, zero pins, and
resident memory within --max-rss-growth percent of its level after warm-up (of the last server
when faults restarted it). The soak proves something only if it did something: it fails unless
at least --min-served requests were served and --min-checked greedy choices checked per minute,
and, with --faults, every fault kind was injected at least once. Prints a summary line with
those counts and exits non-zero on any violation.
With --faults the server also has a host tier, a disk tier and the Redis pool (a redis-server of
its own on a free loopback port), and faults are injected while the clients run: Redis killed and
restarted, disk records corrupted and truncated, the server killed (SIGKILL) at random points and
restarted on its disk directory, the disk directory full (bench/soak_faults.py).
  bench/soak.py --minutes M [--seed S] [--clients C] [--faults] [--bin build/bin/pagoda] [--model GGUF]
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import soak_faults

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIXES = ["Once upon a time, there was a little girl named Lily.",
            "Tom and his dog went to the park to play with a red ball.",
            "One day, a big bird flew over the house."]
SUFFIXES = ["", " She", " He was very happy", " They", " The sun was", " Then"]
REMOTE_FAULTS = 'pagoda_kv_remote_errors_total{tier="remote"}'
REMOTE_RECOVERIES = 'pagoda_kv_remote_recoveries_total{tier="remote"}'


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
    def __init__(self, args, server):
        self.args, self.server, self.port = args, server, server.port
        self.lock = threading.Lock()
        self.stats = {"requests": 0, "ok": 0, "refused": 0, "aborted": 0, "sampled": 0, "choices_checked": 0,
                      "cut_by_crash": 0, "references": 0}
        self.errors = []
        self.references = {}

    def error(self, what):
        with self.lock:
            if len(self.errors) < 50:
                self.errors.append(what)

    def reference(self, prompt):
        """The greedy 64 tokens of `prompt` from `pagoda run` (its own process and engine), checked
        against the server's answer to the same request alone."""
        run = subprocess.run([self.args.bin, "run", "-m", self.args.model, "-p", prompt, "-n", "64", "--temp", "0",
                              "--json", "--quiet"], capture_output=True, text=True, timeout=600)
        if run.returncode != 0:
            raise SystemExit(f"soak: pagoda run failed for the reference of {prompt!r}: {run.stderr[-2000:]}")
        j = json.loads(run.stdout)
        ref = (j["text"], j["finish_reason"])
        status, _, s = complete(self.port, {"prompt": prompt, "max_tokens": 64, "temperature": 0})
        if status != 200:
            raise SystemExit(f"soak: reference request failed: {status} {s}")
        got = (s["choices"][0]["text"], s["choices"][0]["finish_reason"])
        if got != ref:
            self.error(f"wrong tokens: the server's single request for {prompt!r} gave {got!r}, pagoda run {ref!r}")
        with self.lock:
            self.stats["references"] += 1
        return ref

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
            prompt = rng.choice(self.prefixes) + rng.choice(SUFFIXES)
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
            epoch = self.server.epoch
            crashed = lambda: self.server.down or self.server.epoch != epoch
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
            except (OSError, http.client.HTTPException, ValueError, TypeError, KeyError) as e:
                if crashed():
                    with self.lock:
                        self.stats["cut_by_crash"] += 1
                    time.sleep(0.05)
                    continue
                self.error(f"connection error: {e!r}")
                continue
            if status in (-1, 500) and crashed():  # a stream cut by the crash
                with self.lock:
                    self.stats["cut_by_crash"] += 1
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
        for name, value in m.items():
            if name.startswith("pagoda_kv_tier_blocks{"):
                cap = m.get(name.replace("pagoda_kv_tier_blocks{", "pagoda_kv_tier_blocks_capacity{"), -1)
                if value < 0 or value > cap:
                    self.error(f"{name} = {value} beyond its capacity {cap}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin/pagoda"))
    ap.add_argument("--model", default=os.path.join(os.environ.get("PAGODA_TEST_DATA", os.path.join(ROOT, "../shared")),
                                                    "models/stories260K/stories260K.gguf"))
    ap.add_argument("--kv-cache-mem", default="256K", help="small (f16 KV, the default): forces preemption and eviction")
    ap.add_argument("--max-rss-growth", type=float, default=10.0, help="percent over the level after warm-up")
    ap.add_argument("--warm-up", type=float, default=10.0, help="seconds of load before the memory baseline")
    ap.add_argument("--rss-settle", type=float, default=45.0,
                    help="--faults: seconds after a (re)start before a server's memory baseline (its tiers and "
                         "buffers fill first: about 40 s here)")
    ap.add_argument("--faults", action="store_true",
                    help="host + disk tiers and a Redis pool, with faults injected (bench/soak_faults.py)")
    ap.add_argument("--fault-every", type=float, default=10.0, help="seconds between two faults (--faults)")
    ap.add_argument("--min-served", type=float, default=100.0,
                    help="requests served per minute below which the soak fails (it proved nothing)")
    ap.add_argument("--min-checked", type=float, default=100.0,
                    help="greedy choices checked per minute below which the soak fails")
    args = ap.parse_args()

    workdir = tempfile.mkdtemp(prefix="pagoda-soak-")
    port = soak_faults.free_port()
    cmd = [args.bin, "serve", "-m", args.model, "--port", str(port), "--kv-cache-mem", args.kv_cache_mem,
           "--max-num-seqs", "8", "--max-waiting", "16", "--quiet", "--no-dashboard"]
    redis = None
    disk_dir = os.path.join(workdir, "disk")
    if args.faults:
        os.makedirs(disk_dir)
        redis = soak_faults.Redis(workdir)
        # Small tiers: the host tier and the disk tier fill and evict; every block is also in Redis.
        cmd += ["--kv-host-mem", "128K", "--kv-disk-dir", disk_dir, "--kv-disk-mem", "2M",
                "--kv-remote", f"redis://127.0.0.1:{redis.port}", "--kv-remote-timeout-ms", "200"]
    server = soak_faults.Server(cmd, port)
    try:
        server.start()
        soak = Soak(args, server)
        # With tiers, prompts of a few blocks (prefix x 3), so that loads from the tiers happen.
        soak.prefixes = [p + " " + p + " " + p for p in PREFIXES] if args.faults else PREFIXES
        for p in soak.prefixes:
            for s in SUFFIXES:
                soak.references[p + s] = soak.reference(p + s)
        # Warm-up: a short burst of the mix.
        warm = [threading.Thread(target=soak.client, args=(args.seed * 1000 + i, time.time() + args.warm_up))
                for i in range(args.clients)]
        [t.start() for t in warm]
        [t.join() for t in warm]
        rss_base = (server.epoch, rss_kb(server.proc.pid))
        start = time.time()
        rss_trace = [(start, server.epoch, rss_base[1])]  # every 15 s: (time, server, KiB)
        rss_settled = not args.faults  # with faults, the baseline waits for --rss-settle
        deadline = start + args.minutes * 60
        threads = [threading.Thread(target=soak.client, args=(args.seed * 7919 + i, deadline)) for i in range(args.clients)]
        faults = None
        if args.faults:
            faults = soak_faults.Faults(server, redis, disk_dir, random.Random(args.seed), args.fault_every, soak.error)
            threads.append(threading.Thread(target=faults.run, args=(deadline, args.rss_settle + 30)))
        [t.start() for t in threads]
        while any(t.is_alive() for t in threads):
            time.sleep(2)
            if faults:
                faults.lock.acquire()  # not while the server is down
            try:
                settle = args.rss_settle if args.faults else args.warm_up
                if (rss_base[0] != server.epoch or not rss_settled) and time.time() - server.started_at >= settle:
                    rss_settled = True
                    rss_base = (server.epoch, rss_kb(server.proc.pid))  # a restarted server's own baseline
                m = metrics(port)
                server.last_metrics = m
                soak.check_metrics(m)
                if time.time() - rss_trace[-1][0] >= 15:
                    rss_trace.append((time.time(), server.epoch, rss_kb(server.proc.pid)))
            except OSError:
                if server.proc.poll() is not None:
                    raise SystemExit(f"soak: the server died (exit {server.proc.returncode}); its output:\n"
                                     + server.output()[-4000:])
                soak.error("/metrics did not answer")
            finally:
                if faults:
                    faults.lock.release()
        [t.join() for t in threads]
        # Drained: nothing running or waiting, no block in use.
        for _ in range(600):
            m = metrics(port)
            if m.get("pagoda_requests_running", 1) == 0 and m.get("pagoda_requests_waiting", 1) == 0 and \
                    m.get('pagoda_kv_blocks{state="in_use"}', 1) == 0:
                break
            time.sleep(0.1)
        m = metrics(port)
        server.last_metrics = m
        soak.check_metrics(m)
        in_use = m.get('pagoda_kv_blocks{state="in_use"}', -1)
        if in_use != 0 or m.get("pagoda_requests_running", -1) != 0 or m.get("pagoda_requests_waiting", -1) != 0:
            soak.error(f"not drained: {in_use} blocks in use, running {m.get('pagoda_requests_running')}, "
                       f"waiting {m.get('pagoda_requests_waiting')}")
        if m.get("pagoda_kv_pins", -1) != 0 or m.get("pagoda_kv_pinned_blocks", -1) != 0:
            soak.error(f"pins left: {m.get('pagoda_kv_pins')} pins, {m.get('pagoda_kv_pinned_blocks')} pinned blocks")
        if rss_base[0] != server.epoch or not rss_settled:
            soak.error("the last server did not live through its warm-up (no memory baseline)")
        if args.faults:  # Redis is up again: the remote tier must find it (probed by backoff, at most
            # 30 s apart, as the step loop runs: requests keep it running; each is checked)
            probe_end = time.time() + 40
            while m.get('pagoda_kv_remote_up{tier="remote"}', 0) != 1 and time.time() < probe_end:
                prompt = soak.prefixes[0]
                status, _, j = complete(port, {"prompt": prompt, "max_tokens": 64, "temperature": 0})
                if status != 200:
                    soak.error(f"status {status} after the run")
                else:
                    soak.check_choice(prompt, j["choices"][0]["text"], j["choices"][0]["finish_reason"], 64)
                time.sleep(0.5)
                m = metrics(port)
            if m.get('pagoda_kv_remote_up{tier="remote"}', 0) != 1:
                soak.error("the remote tier is still down although Redis is up")
        rss_warm, rss_end = rss_base[1], rss_kb(server.proc.pid)
        growth = 100.0 * (rss_end - rss_warm) / max(rss_warm, 1)
        if growth > args.max_rss_growth:
            soak.error(f"resident memory grew {growth:.1f}% ({rss_warm} -> {rss_end} KiB)")
        if server.proc.poll() is not None:
            soak.error(f"the server exited with {server.proc.returncode}")
        else:
            code = server.stop()  # a clean exit on SIGTERM: under ASan, no leak at exit
            if code != 0:
                time.sleep(0.5)  # the output reader drains what the server printed last
                soak.error(f"the server's exit on SIGTERM was {code}, not 0; its last output:\n" +
                           "".join(list(server.log)[-40:]))
        st = soak.stats
        # A soak that did too little proves nothing: fail it.
        if st["ok"] < args.min_served * args.minutes:
            soak.error(f"only {st['ok']} requests served, fewer than {args.min_served:g} a minute")
        if st["choices_checked"] < args.min_checked * args.minutes:
            soak.error(f"only {st['choices_checked']} greedy choices checked, fewer than {args.min_checked:g} a minute")
        if faults:
            missing = [k for k, n in faults.counts.items() if n == 0]
            if missing:
                soak.error("fault kinds never injected: " + ", ".join(missing))
        t = server.total
        server_aborts = t('pagoda_requests_finished_total{reason="abort"}')
        summary = (f"soak: {args.minutes:g} min, seed {args.seed}: {st['requests']} requests, {st['ok']} served "
                   f"({st['choices_checked']} greedy choices checked against {st['references']} `pagoda run` "
                   f"references, {st['sampled']} sampled), {st['aborted']} aborted by "
                   f"their clients, {st['refused']} refused (429/503), preemptions {t('pagoda_preemptions_total'):.0f}, "
                   f"evicted blocks {t('pagoda_kv_evicted_blocks_total'):.0f}, aborts seen by the server "
                   f"{server_aborts:.0f}")
        if faults:
            def tier(name):  # summed over the tiers
                return sum(t(k) for k in set(server.totals) | set(m) if k.startswith(name + "{"))
            summary += (f"; faults: {faults.counts['redis']} Redis kills, {faults.counts['crash']} server crashes "
                        f"(SIGKILL), {faults.counts['full']} full-disk restarts, {faults.counts['flip'] + faults.counts['crash']} "
                        f"corruptions ({faults.flipped} bytes flipped, {faults.counts['crash'] + faults.counts['full']} "
                        f"files truncated); {st['cut_by_crash']} requests cut by crashes; tier hit tokens "
                        f"{tier('pagoda_kv_tier_hit_tokens_total'):.0f}, corrupt records dropped "
                        f"{tier('pagoda_kv_tier_corrupt_records_total'):.0f}, tier faults {tier('pagoda_kv_tier_faults_total'):.0f}, "
                        f"Redis faults {t(REMOTE_FAULTS):.0f}, recoveries {t(REMOTE_RECOVERIES):.0f}")
        summary += (f"; wrong tokens {sum(1 for e in soak.errors if e.startswith('wrong'))}, leaked blocks {in_use:.0f}, "
                    f"RSS {rss_warm} -> {rss_end} KiB ({growth:+.1f}%)")
        print(summary, flush=True)
        print("soak: RSS every 15 s (server: KiB): " +
              ", ".join(f"{e}: {kb}" for _, e, kb in rss_trace + [(0, server.epoch, rss_end)]), flush=True)
        for e in soak.errors:
            print("soak: ERROR", e)
        return 1 if soak.errors else 0
    finally:
        server.stop()
        if redis:
            redis.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
