"""The soak's processes and faults (bench/soak.py --faults): `pagoda serve` as a restartable process,
a loopback redis-server, and the faults injected into them while clients run.

Faults, one every --fault-every seconds, in a fixed rotation (seeded choices inside each):
  redis    redis-server killed (SIGKILL) and, 1-3 s later, restarted on the same port, empty: the
           remote tier must turn every call into a miss, reconnect, and serve on;
  flip     bytes flipped in records of the disk tier's slot files while the server runs: a read
           of such a record must fail verification (counted as corrupt), never reach the pool;
  crash    the server killed with SIGKILL at a random moment (requests mid-prefill, mid-stream, disk
           writes in flight), one slot file truncated mid-record and bytes flipped, then the server
           restarted on the same directory: it must start, drop what is cut or broken, and serve;
  full     the disk tier's directory cannot take the tier's space: the server is killed, a slot
           file truncated to zero, and a server started with RLIMIT_FSIZE below the file's size
           (a full disk as seen by fallocate, as root and non-root alike) must refuse to start with
           an error naming the file; then restarted without the limit. While the old server still
           ran, the directory was also filled with a filler file: the slot files are preallocated
           at start-up, so a directory that fills at run time takes nothing from the tier.
Requests cut by a crash are counted, not errors; every other check of the soak stays on.
"""
import collections
import os
import random
import re
import resource
import signal
import socket
import subprocess
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Redis:
    """A redis-server on a free loopback port, no persistence; kill() and start() keep the port."""

    def __init__(self, workdir):
        self.dir = os.path.join(workdir, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--protected-mode", "no", "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit(f"soak: redis-server did not start on port {self.port}")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.kill()


def server_env():
    """The server's environment. Under AddressSanitizer (`make test`'s build) freed memory waits in
    a quarantine of 256 MiB by default, which the process fills over minutes: resident memory
    would grow by that much whatever the server does. A 16 MiB quarantine fills within the
    warm-up, so the growth check measures the server again (use-after-free detection stays on;
    an explicit quarantine_size_mb in ASAN_OPTIONS wins). Ignored by uninstrumented binaries."""
    env = dict(os.environ)
    asan = env.get("ASAN_OPTIONS", "")
    if "quarantine_size_mb" not in asan:
        env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "quarantine_size_mb=16"
    return env


class Server:
    """`pagoda serve` with a fixed port, restartable; epoch counts its incarnations."""

    def __init__(self, cmd, port):
        self.cmd, self.port = cmd, port
        self.proc = None
        self.epoch = 0
        self.down = False
        self.started_at = 0.0
        self.last_metrics = {}   # the newest /metrics of this incarnation (counters reset on restart)
        self.totals = {}         # counters summed over the incarnations that ended
        self.log = []

    def spawn(self, fsize_limit=None):
        def limits():
            if fsize_limit is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))
        proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=limits, env=server_env())
        lines = collections.deque(maxlen=200)  # the newest lines of its output, kept while it runs
        for line in proc.stdout:
            lines.append(line)
            if re.search(r"http://127\.0\.0\.1:(\d+)", line):
                threading.Thread(target=lambda: [lines.append(l) for l in proc.stdout], daemon=True).start()
                return proc, lines
        proc.wait()
        return None, lines

    def output(self):
        return "".join(self.log)

    def start(self):
        for _ in range(50):  # the port may still be held for a moment after a kill
            proc, lines = self.spawn()
            if proc is not None:
                self.proc, self.log = proc, lines
                self.epoch += 1
                self.started_at = time.time()
                self.down = False
                return
            if not any("in use" in l or "bind" in l.lower() for l in lines):
                raise SystemExit("soak: the server did not start:\n" + "".join(lines))
            time.sleep(0.1)
        raise SystemExit("soak: the server did not start:\n" + "".join(lines))

    def kill(self):
        self.down = True
        self.proc.kill()
        self.proc.wait()
        for name, value in self.last_metrics.items():
            if name.split("{")[0].endswith("_total"):
                self.totals[name] = self.totals.get(name, 0) + value
        self.last_metrics = {}

    def total(self, name):
        return self.totals.get(name, 0) + self.last_metrics.get(name, 0)

    def stop(self):
        """SIGTERM, then its exit status (None if it had to be killed): 0 when it drained and exited
        cleanly; under AddressSanitizer a leak found at exit makes it non-zero."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                return self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode if self.proc else None


def slot_files(disk_dir):
    return sorted(os.path.join(disk_dir, f) for f in os.listdir(disk_dir) if re.match(r"kv-slots-\d+\.pgkv$", f))


def flip_bytes(disk_dir, rng, count=32):
    """Flips `count` bytes at random offsets of the slot files' written parts; returns how many."""
    flipped = 0
    for _ in range(count):
        files = [f for f in slot_files(disk_dir) if os.path.getsize(f) > 0]
        if not files:
            return flipped
        path = rng.choice(files)
        with open(path, "r+b") as f:
            size = os.path.getsize(path)
            off = rng.randrange(size)
            f.seek(off)
            b = f.read(1)
            if not b or b == b"\0":  # zeros are free space or padding: look for a written byte nearby
                continue
            f.seek(off)
            f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
            flipped += 1
    return flipped


class Faults:
    """Injects one fault every `every` seconds until `deadline` (crash faults only while at least
    `settle` seconds remain, so the last server lives long enough for its memory check)."""

    ROTATION = ["crash", "redis", "full", "flip", "redis", "flip"]

    def __init__(self, server, redis, disk_dir, rng, every, error):
        self.server, self.redis, self.disk_dir, self.rng, self.every = server, redis, disk_dir, rng, every
        self.error = error
        self.counts = {k: 0 for k in ("redis", "flip", "crash", "full")}
        self.flipped = 0
        self.lock = threading.Lock()  # held while the server is down or being restarted

    def run(self, deadline, settle):
        try:
            self.inject(deadline, settle)
        except BaseException as e:  # a server that does not come back fails the soak
            self.error(f"fault injection failed: {e}")

    def inject(self, deadline, settle):
        i = 0
        while time.time() + self.every < deadline:
            time.sleep(self.every)
            kind = self.ROTATION[i % len(self.ROTATION)]
            i += 1
            if kind in ("crash", "full") and time.time() + settle > deadline:
                kind = "flip"
            {"redis": self.redis_fault, "flip": self.flip, "crash": self.crash, "full": self.full}[kind]()
            self.counts[kind] += 1

    def redis_fault(self):
        self.redis.kill()
        time.sleep(1 + 2 * self.rng.random())
        self.redis.start()

    def flip(self):
        self.flipped += flip_bytes(self.disk_dir, self.rng)

    def crash(self):
        with self.lock:
            time.sleep(self.rng.random())  # a random point of whatever is in flight
            self.server.kill()
            files = [f for f in slot_files(self.disk_dir) if os.path.getsize(f) > 4096]
            if files:
                path = self.rng.choice(files)
                os.truncate(path, self.rng.randrange(4096, os.path.getsize(path)))  # cuts a record
            self.flipped += flip_bytes(self.disk_dir, self.rng, 8)
            self.server.start()

    def full(self):
        filler = os.path.join(self.disk_dir, "filler")
        with open(filler, "wb") as f:  # fills the directory while the tier runs (a no-op for it)
            f.write(b"\xff" * (4 << 20))
        time.sleep(1)
        with self.lock:
            self.server.kill()
            files = slot_files(self.disk_dir)
            if files:
                size = os.path.getsize(files[0])
                os.truncate(files[0], 0)
                proc, lines = self.server.spawn(fsize_limit=max(size // 2, 8192))
                if proc is not None:
                    proc.kill()
                    proc.wait()
                    self.error("full: a server started although its slot file could not be reserved")
                elif not any("cannot reserve" in l for l in lines):
                    self.error("full: the start-up error does not say why: " + "".join(lines)[-400:])
            os.unlink(filler)
            self.server.start()
