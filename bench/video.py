#!/usr/bin/env python3
"""Video seeks on huge objects: edgecache with `slice = "1m"` against nginx with its slice
module, in the same run, behind the same origin.

Usage: edgebench video [--quick] [--duration 10s] [--repetitions 3] [--cpus 0:1]
                       [--out docs/results] [--keep], which runs
       python3 bench/video.py [--quick] [--seconds 10] [--settle 12]
                              [--repetitions N | --reps N]
                              [--cpus SERVER:CLIENT] [--out docs/results] [--keep]
                              [--nice N] [--object-size 2g] [--seeks N] [--warm-span 64m]
                              [--no-slice] [--aio KEY=VALUE]... [--location KEY=VALUE]...
                              [--counters]
                              [--perf DIR]

Needs target/release/{edgecache,edgeorigin,edgeload} (`cargo build --release -p
edgecache -p edgeorigin -p edgeload`; `EDGEBENCH_EDGECACHE` overrides the edgecache
binary), nginx with `--with-http_slice_module` (Debian's; `EDGEBENCH_NGINX` overrides the
path) and taskset. `--quick`: one repetition, 64 MiB objects, 2 seeks per client, a 16 MiB
warm span and a 3 s hit phase (explicit flags still win): under a minute.

The objects: ten (`OBJECTS`) of `--object-size` (default 2 GiB) from one edgeorigin
(`/obj/<size>/1` .. `/10`, `--max-age 3600`), which serves any range of a huge object
from its offset without generating what comes before. Before the first phase each object
is asked once with HEAD, so the origin has computed (and cached, once per process) its
`X-Checksum`: hashing 2 GiB takes about a second, which would otherwise land on the
first seek of each object.

The servers, each started afresh with an empty cache for every repetition and pinned to
the server CPUs (`--cpus`, default 0:1) at nice -10 when root; the clients on the client
CPUs; the origin on no particular CPU. One worker per server CPU, a disk cache in the run
directory (edgecache without its RAM tier, as in `edgebench hits`), access logs off, a
keep-alive upstream to the origin:
- edgecache: the location has `slice = "1m"` (docs/config.md). `--no-slice` leaves it out:
  the whole-object baseline, where a Range miss fetches and stores the whole object (and
  `--object-size` defaults to 256 MiB, so ten objects per repetition fit on the disk).
- nginx: `slice 1m; proxy_cache_key $uri$is_args$args$slice_range; proxy_set_header Range
  $slice_range; proxy_cache_valid 200 206 1h;`.

Per repetition and server (the order alternates from one repetition to the next):
1. miss: 32 clients (`CLIENTS`, Python threads in this process, each on its own
   keep-alive connection) start together; each makes `--seeks` seeks (default 8): an
   object uniform over the ten and a byte offset uniform over the object, then reads 4
   MiB from there in four 1 MiB `Range: bytes=a-b` requests, one after another, as a
   player does after a seek. Every answer must be a 206 with the asked Content-Range and
   1 MiB of body. Time to first byte: from the request's send to the first byte of its
   answer; a seek's first request is a seek miss (ten objects of 2 GiB hold 20,480
   slices; 256 seeks rarely meet). The origin's /stats are zeroed before the phase and
   read once its byte count has stopped moving (a whole-object fill goes on after the
   client has its range): origin body bytes / client body bytes.
2. warm-up: every object's first `--warm-span` bytes (default 64 MiB) through the server
   in aligned 1 MiB ranges, so that every range of the next phase is cached; then one
   range per object must answer `X-Cache-Status: HIT`.
3. hit: `edgeload -c32 --paths 10 --seek SPAN,4m,1m` for `--seconds`: the same seeking
   pattern, offsets within the warm span, closed loop, after `--settle` seconds of the
   same load that are not counted (default 12, as `edgebench hits` discards a load
   before each cell; 0 with `--quick`). req/s, and server CPU per request (with its
   kernel part: our kernel time alone against nginx's whole CPU is reported too)
   (utime+stime of the server's process group from /proc, around the phase); the
   origin's request count must not move.
4. disk: the blocks the cache directory holds (after the miss phase, and at the end,
   once the server has stopped), after a sync.

`--aio KEY=VALUE` (repeatable) adds a key to edgecache's `[aio]` table, the value as TOML
(`--location KEY=VALUE` likewise to its `[[location]]`: `--location slice_prefetch=1`)
(`--aio 'sendfile_max="off"'`: every hit body by sendfile). `--counters` (root) runs
`perf stat -C <server CPUs>` over each hit phase and reports per hit: syscalls (all, and
sendfile/writev/...), hrtimer starts (under BBR on loopback, TCP pacing timers), softirqs
and user page faults. `--perf DIR` (root) runs `perf record -e cpu-clock -g` on the
server CPUs over each hit phase, into `DIR/<server>-<rep>.data`.

Ratios edgecache / nginx are taken per repetition, then the median (min-max). Writes
`video.md` and `video.json` to --out. Targets (issue 28): origin bytes per client byte
<= 1.1; seek-miss TTFB p99 <= 1.2x nginx's; hit req/s >= 1.2x nginx's.
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import benchlib
from benchlib import (ROOT, BIN, free_port, wait_port, get_json, group_cpu_split, stop_group,
                      log_lines)

EDGECACHE_BIN = os.environ.get("EDGEBENCH_EDGECACHE") or os.path.join(BIN, "edgecache")
SERVERS = ("edgecache", "nginx")
OBJECTS = 10
CLIENTS = 32
MIB = 1 << 20
READ = 4 * MIB
STEP = 1 * MIB
SLICE = "1m"
# Targets (issue 28).
ORIGIN_PER_CLIENT_MAX = 1.1
TTFB_P99_VS_NGINX_MAX = 1.2
HITS_VS_NGINX_MIN = 1.2
# A whole-object baseline stores every object it touches: at most this much per run.
NO_SLICE_DISK_MAX = 24 << 30
# `--counters`: kernel events on the server CPUs over the hit phase (perf stat -C), per
# hit. Under BBR on loopback nearly every hrtimer start of a large send is a TCP pacing
# timer (docs/results/large-hits.md).
# net_dev_xmit: packets the server CPU put on loopback (its segments, and the client's
# ACKs when the client's softirq ran there); sched_waking and ipi_send_cpu: the wake-ups
# of the client that each delivered segment may cost, and those that crossed CPUs.
COUNTERS = ["raw_syscalls:sys_enter", "timer:hrtimer_start", "irq:softirq_entry",
            "exceptions:page_fault_user", "net:net_dev_xmit", "sched:sched_waking",
            "ipi:ipi_send_cpu"] + [
    f"syscalls:sys_enter_{c}" for c in ("sendfile64", "writev", "sendto", "write", "mmap",
                                        "munmap", "mincore", "openat")]
# Reads that wait on a whole-object fill may take a while.
CLIENT_TIMEOUT = 300

EDGECACHE = benchlib.EDGECACHE_REUSEPORT_HEAD + """
# No RAM tier (on by default): hits come from the disk cache, as nginx's do.
[memory_cache]
size = "off"

[[upstream]]
name = "origin"
servers = ["127.0.0.1:{origin}"]
keepalive = 16

[[location]]
prefix = "/"
proxy = "origin"
cache = ["bench"]
cache_valid = {{ "200" = "1h" }}
{slice}"""

NGINX = """daemon off;
master_process on;
worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
    worker_connections 4096;
}}

http {{
""" + benchlib.NGINX_HTTP_COMMON + """
    proxy_cache_path {dir}/cache levels=1:2 keys_zone=bench:64m max_size={max_size} inactive=1h use_temp_path=off;

    upstream origin {{
        server 127.0.0.1:{origin};
        keepalive 16;
    }}

    server {{
        listen 127.0.0.1:{port};

        location / {{
            slice {slice};
            proxy_cache bench;
            proxy_cache_key $uri$is_args$args$slice_range;
            proxy_set_header Range $slice_range;
            proxy_cache_valid 200 206 1h;
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            add_header X-Cache-Status $upstream_cache_status;
        }}
    }}
}}
"""

HOW_TO_READ = """Origin bytes per client byte: what the origin sent during the miss phase
(its /stats, read once they stopped moving) over the body bytes the clients received.
nginx's slice module fetches the whole 1 MiB slices a range touches: a 4 MiB read from a
random byte offset touches 5, so 1.25 is its floor (the table's row) unless reads share
slices, which they do only when the seeks are dense in the objects (small objects, many
seeks). edgecache fetches only the bytes a range needs of each slice and completes a
partial slice later with only its missing bytes, so its floor is 1.0 (below 1.0 when
seeks overlap). A whole-object fetch costs the object per seek into a new object. Seek-miss TTFB: the first request of each seek, from send to
the first byte of the answer: one slice (or the part of the object up to the offset, for
a whole-object fill) fetched from the origin. Later reads: the other three requests of a
seek, which find part of their range cached. Hit req/s: 1 MiB ranges from the warm span,
32 connections, closed loop; CPU per hit: the server's process-group CPU time over the
requests. X-Cache-Status: nginx's on a sliced answer is its first slice's. Disk: the blocks of the cache directory (du), after the miss phase and at the
end (after the warm span was read)."""


def need(tool):
    return benchlib.need(tool, "video.py", " (sudo bench/peers/install.sh)")


def size_text(n):
    for shift, unit in ((30, "g"), (20, "m"), (10, "k")):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def parse_size(text):
    t = text.strip().lower()
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in "kmg" else t
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (64m, 2g, 4096)")
    return int(digits) * mult


class Server:
    def __init__(self, kind, work, rep, origin, a):
        self.kind = kind
        self.dir = os.path.join(work, f"{kind}-{rep}")
        os.makedirs(self.dir)
        # nginx's workers run as an unprivileged user: they must be able to write here.
        os.chmod(self.dir, 0o777)
        self.cache = os.path.join(self.dir, "cache")
        self.port = free_port()
        self.admin = free_port() if kind == "edgecache" else None
        self.a = a
        workers = len(a.server_cpus)
        max_size = size_text(max(8 << 30, 2 * OBJECTS * a.object_size))
        if kind == "edgecache":
            self.cfg = os.path.join(self.dir, "edgecache.toml")
            text = EDGECACHE.format(workers=workers, dir=self.dir, port=self.port,
                                    admin=self.admin, origin=origin, max_size=max_size,
                                    slice=("" if a.no_slice else f'slice = "{SLICE}"\n')
                                    + "".join(f"{k} = {v}\n" for k, v in a.location))
            if a.aio:
                text += "\n[aio]\n" + "".join(f"{k} = {v}\n" for k, v in a.aio)
        else:
            self.cfg = os.path.join(self.dir, "nginx.conf")
            text = NGINX.format(workers=workers, dir=self.dir, port=self.port,
                                origin=origin, max_size=max_size, slice=SLICE)
        with open(self.cfg, "w") as f:
            f.write(text)
        self.proc = None

    def check(self):
        """`edgecache -t` on the config: exits the script with its message if refused."""
        if self.kind != "edgecache":
            return
        r = subprocess.run([EDGECACHE_BIN, "-t", "-c", self.cfg], capture_output=True,
                           text=True, timeout=30)
        if r.returncode == 0:
            return
        msg = (r.stderr + r.stdout).strip()
        hint = ("\nThis edgecache build does not know `slice`: `--no-slice` runs the "
                "whole-object baseline." if "slice" in msg and not self.a.no_slice else "")
        raise SystemExit(f"video.py: edgecache -t refuses the config (exit "
                         f"{r.returncode}):\n{msg}{hint}")

    def start(self):
        pin = self.a.nice_cmd + ["taskset", "-c", ",".join(map(str, self.a.server_cpus))]
        if self.kind == "edgecache":
            cmd = pin + [EDGECACHE_BIN, "-c", self.cfg]
        else:
            cmd = pin + [need("nginx"), "-c", self.cfg, "-p", self.dir]
        with open(os.path.join(self.dir, "stderr.log"), "a") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                                         start_new_session=True)
        try:
            wait_port(self.port, timeout=20)
            if self.admin:
                wait_port(self.admin, timeout=20)
        except SystemExit:
            raise SystemExit(f"video.py: {self.kind} did not start:\n"
                             + "\n".join(self.log_lines()[-20:]))

    def stop(self):
        stop_group(self.proc)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def cpu(self):
        """(user, kernel) CPU seconds of the server's process group."""
        return group_cpu_split(self.proc.pid)

    def log_lines(self):
        return log_lines(self.dir)

    def large_hits(self):
        """edgecache: each worker's `large_hits` of /status (how bodies over
        `aio.sendfile_max` left, and under "auto" the way it chose); None for nginx."""
        if not self.admin:
            return None
        try:
            st = get_json(self.admin, "/status", timeout=5)
        except (OSError, ValueError):
            return None
        return [w["large_hits"] for w in st.get("workers", []) if "large_hits" in w] or None

    def slice_metrics(self):
        """edgecache: every /metrics series whose name mentions slices (None for nginx)."""
        if not self.admin:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics",
                                        timeout=5) as r:
                text = r.read().decode(errors="replace")
        except OSError:
            return None
        got = {}
        for ln in text.splitlines():
            name, _, value = ln.rpartition(" ")
            if not ln.startswith("#") and "slice" in name:
                try:
                    got[name] = float(value)
                except ValueError:
                    pass
        return got


def disk_bytes(path):
    """Bytes of disk the files under `path` hold (their blocks, as du counts)."""
    total = 0
    for d, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(d, name)).st_blocks * 512
            except OSError:
                pass
    return total


# ---- the seeking clients of the miss phase and the warm-up ----

class Conn:
    """One keep-alive HTTP/1.1 connection that asks for byte ranges."""

    def __init__(self, port):
        self.port = port
        self.sock = None
        self.buf = b""

    def close(self):
        if self.sock:
            self.sock.close()
        self.sock, self.buf = None, b""

    def get_range(self, path, first, last):
        """GET `path` with `Range: bytes=first-last`. Returns (ttfb s, total s, status,
        headers dict lower-cased, body bytes)."""
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port),
                                                 timeout=CLIENT_TIMEOUT)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The Host edgeload sends (`host:port` of its URL): the default cache key holds
        # the host, so the warm-up must use it for the hit phase to find its slices.
        req = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
               f"Range: bytes={first}-{last}\r\n\r\n").encode()
        t0 = time.perf_counter()
        self.sock.sendall(req)
        ttfb = None
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("connection closed before the head")
            if ttfb is None:
                ttfb = time.perf_counter() - t0
            self.buf += chunk
        if ttfb is None:
            ttfb = time.perf_counter() - t0
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
        if "content-length" not in headers:
            raise OSError(f"status {status} without Content-Length")
        want = int(headers["content-length"])
        got = min(want, len(self.buf))
        self.buf = self.buf[got:]
        while got < want:
            chunk = self.sock.recv(min(1 << 20, want - got))
            if not chunk:
                raise OSError(f"connection closed after {got} of {want} body bytes")
            got += len(chunk)
        if headers.get("connection", "").lower() == "close":
            self.close()
        return ttfb, time.perf_counter() - t0, status, headers, got


def check_answer(status, headers, body, first, last, size):
    """What is wrong with a range answer, or None."""
    want_cr = f"bytes {first}-{last}/{size}"
    if status != 206:
        return f"status {status}"
    if headers.get("content-range") != want_cr:
        return f"Content-Range {headers.get('content-range')!r}, not {want_cr!r}"
    if body != last - first + 1:
        return f"{body} body bytes for {last - first + 1}"
    return None


def seek_client(port, a, seeks, seed, out, start):
    rng = random.Random(seed)
    conn = Conn(port)
    start.wait()
    try:
        for _ in range(seeks):
            oid = rng.randrange(1, OBJECTS + 1)
            offset = rng.randrange(0, a.object_size - READ + 1)
            path = f"/obj/{a.size_text}/{oid}"
            for k in range(READ // STEP):
                first = offset + k * STEP
                last = first + STEP - 1
                try:
                    ttfb, total, status, headers, body = conn.get_range(path, first, last)
                except OSError as e:
                    conn.close()
                    out["errors"].append(f"{path} bytes={first}-{last}: {e}")
                    continue
                out["bytes"] += body
                bad = check_answer(status, headers, body, first, last, a.object_size)
                if bad:
                    out["errors"].append(f"{path} bytes={first}-{last}: {bad}")
                    continue
                (out["seek_ttfb"] if k == 0 else out["next_ttfb"]).append(ttfb)
                out["total"].append(total)
                cache = headers.get("x-cache-status", "none")
                out["cache"][cache] = out["cache"].get(cache, 0) + 1
                if k == 0 and cache == "HIT":
                    out["seek_hits"] += 1
    finally:
        conn.close()


def origin_stats(oport):
    return get_json(oport, "/stats")


def settled_origin(oport, quiet=1.0, limit=CLIENT_TIMEOUT):
    """The origin's /stats once its byte count has not moved for `quiet` s (fills that
    outlive their clients are counted whole), or after `limit` s."""
    end = time.time() + limit
    last = origin_stats(oport)
    while time.time() < end:
        time.sleep(quiet)
        now = origin_stats(oport)
        if now["bytes"] == last["bytes"] and now["requests"] == last["requests"]:
            return now
        last = now
    return last


def miss_phase(s, a, oport, rep):
    urllib.request.urlopen(f"http://127.0.0.1:{oport}/stats?reset=1", timeout=5).read()
    outs = [{"bytes": 0, "errors": [], "seek_ttfb": [], "next_ttfb": [], "total": [],
             "cache": {}, "seek_hits": 0} for _ in range(CLIENTS)]
    start = threading.Barrier(CLIENTS + 1)
    threads = [threading.Thread(target=seek_client, daemon=True,
                                args=(s.port, a, a.seeks, rep * 1000 + i, outs[i], start))
               for i in range(CLIENTS)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.time()
    for t in threads:
        t.join()
    wall = time.time() - t0
    origin = settled_origin(oport)
    client_bytes = sum(o["bytes"] for o in outs)
    cache = {}
    for o in outs:
        for k, v in o["cache"].items():
            cache[k] = cache.get(k, 0) + v
    errors = [e for o in outs for e in o["errors"]]
    return {
        "wall_s": round(wall, 3), "client_bytes": client_bytes,
        "origin_bytes": origin["bytes"], "origin_requests": origin["requests"],
        "origin_status": origin.get("by_status", {}),
        "origin_per_client": origin["bytes"] / client_bytes if client_bytes else None,
        "seek_ttfb_ms": [round(x * 1e3, 3) for o in outs for x in o["seek_ttfb"]],
        "next_ttfb_ms": [round(x * 1e3, 3) for o in outs for x in o["next_ttfb"]],
        "x_cache_status": cache, "seek_hits": sum(o["seek_hits"] for o in outs),
        "seeks": sum(len(o["seek_ttfb"]) for o in outs),
        "errors": len(errors), "error_samples": errors[:10],
    }


def warm_up(s, a):
    """The first `warm_span` bytes of every object in aligned 1 MiB ranges, then one
    unaligned range per object must be a HIT. Returns the problems."""
    problems = []

    def fill(oid):
        conn = Conn(s.port)
        try:
            for first in range(0, a.warm_span, STEP):
                last = first + STEP - 1
                _, _, status, headers, body = conn.get_range(
                    f"/obj/{a.size_text}/{oid}", first, last)
                bad = check_answer(status, headers, body, first, last, a.object_size)
                if bad:
                    problems.append(f"warm-up of object {oid} at {first}: {bad}")
                    return
        except OSError as e:
            problems.append(f"warm-up of object {oid}: {e}")
        finally:
            conn.close()
    threads = [threading.Thread(target=fill, args=(oid,), daemon=True)
               for oid in range(1, OBJECTS + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    conn = Conn(s.port)
    try:
        for oid in range(1, OBJECTS + 1):
            first = a.warm_span // 2 + 12345
            _, _, status, headers, body = conn.get_range(f"/obj/{a.size_text}/{oid}", first,
                                                         first + STEP - 1)
            cache = headers.get("x-cache-status", "no header")
            if status != 206 or cache != "HIT":
                problems.append(f"object {oid} after the warm-up: {status}, "
                                f"X-Cache-Status {cache}, not a 206 HIT")
    except OSError as e:
        problems.append(f"HIT check: {e}")
    finally:
        conn.close()
    return problems


def hit_phase(s, a, oport, rep, work):
    js = os.path.join(work, f"hit-{s.kind}-{rep}.json")
    cmd = a.client_pin + [
        os.path.join(BIN, "edgeload"), "-t", str(len(a.client_cpus)), "-c", str(CLIENTS),
        "-d", f"{a.seconds}s", "-T", "10s", "--paths", str(OBJECTS), "--seek",
        f"{a.warm_span},{READ},{STEP}", "--json", js,
        f"http://127.0.0.1:{s.port}/obj/{a.size_text}"]
    if a.settle:
        # Discarded, as `edgebench hits` discards a load before each cell: the measured
        # phase starts in the steady state (edgecache's sendfile_max = "auto" measures
        # both ways of sending for its first ~10 s of large hits).
        settle = [x for x in cmd if x not in ("--json", js)]
        settle[settle.index("-d") + 1] = f"{a.settle}s"
        subprocess.run(settle, capture_output=True, timeout=a.settle + 60)
    o0 = origin_stats(oport)["requests"]
    stat = (benchlib.PerfStat(COUNTERS, ["-C", a.cpus_text[0]],
                              os.path.join(work, f"perf-stat-{s.kind}-{rep}.txt"))
            if a.counters else None)
    rec = None
    if a.perf:
        rec = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-g", "-C",
                                a.cpus_text[0], "-o",
                                os.path.join(a.perf, f"{s.kind}-{rep}.data")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    c0 = s.cpu()
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.seconds + 60)
    wall = time.time() - t0
    c1 = s.cpu() if s.alive() else None
    counts = stat.stop() if stat else {}
    if rec:
        rec.send_signal(signal.SIGINT)
        rec.wait()
    o1 = origin_stats(oport)["requests"]
    row = {"cmd": " ".join(cmd[cmd.index(os.path.join(BIN, "edgeload")):]),
           "wall_s": round(wall, 3), "origin_requests": o1 - o0,
           "cpu_s": round(sum(c1) - sum(c0), 3) if c1 is not None else None,
           "kernel_s": round(c1[1] - c0[1], 3) if c1 is not None else None,
           "problems": []}
    if r.returncode != 0 or not os.path.exists(js):
        row["problems"].append(f"edgeload exited {r.returncode}: {r.stderr.strip()[-300:]}")
        return row
    with open(js) as f:
        j = json.load(f)
    status = {k: int(v) for k, v in j.get("status", {}).items()}
    lat = j.get("latency_us", {})
    row.update({"requests": j["requests"], "rps": j["rps"], "status": status,
                "errors": {k: v for k, v in j["errors"].items() if v},
                "p50_us": lat.get("p50"), "p99_us": lat.get("p99")})
    ok = status.get("206", 0)
    row["cpu_per_hit_us"] = (row["cpu_s"] * 1e6 / ok if ok and row["cpu_s"] is not None
                             else None)
    row["kernel_per_hit_us"] = (row["kernel_s"] * 1e6 / ok if ok and row["kernel_s"] is not None
                                else None)
    if counts and ok:
        row["counters_per_hit"] = {k: round(v / ok, 3) for k, v in counts.items()}
    if ok != j["requests"]:
        row["problems"].append(f"{j['requests'] - ok} answers were not 206: {status}")
    if row["errors"]:
        row["problems"].append(f"failed requests: {row['errors']}")
    if row["origin_requests"]:
        row["problems"].append(f"{row['origin_requests']} origin requests during the hit "
                               "phase (not all hits)")
    return row


def run_server(s, a, oport, rep, work):
    """One server's phases in one repetition."""
    row = {"server": s.kind, "rep": rep, "problems": []}
    s.start()
    try:
        m0 = s.slice_metrics()
        row["miss"] = miss_phase(s, a, oport, rep)
        # Written back first: blocks still reserved for delayed allocation are not counted.
        os.sync()
        row["disk_after_miss"] = disk_bytes(s.cache)
        m1 = s.slice_metrics()
        if m0 is not None and m1:
            row["slice_metrics"] = {k: v - m0.get(k, 0) for k, v in m1.items()}
        if row["miss"]["errors"]:
            row["problems"].append(f"miss: {row['miss']['errors']} failed reads, e.g. "
                                   f"{row['miss']['error_samples'][:3]}")
        row["problems"] += warm_up(s, a)
        row["hit"] = hit_phase(s, a, oport, rep, work)
        lh = s.large_hits()
        if lh:
            row["large_hits"] = lh
        row["problems"] += [f"hit: {p}" for p in row["hit"]["problems"]]
        if not s.alive():
            row["problems"].append(f"{s.kind} exited during the run")
    finally:
        s.stop()
        # What the cache keeps once its server is gone (temporary files and
        # preallocations of a running server are not the cache's size).
        os.sync()
        row["disk_end"] = disk_bytes(s.cache)
        row["log"] = s.log_lines()[-20:]
        if not a.keep:
            shutil.rmtree(s.cache, ignore_errors=True)
    return row


# ---- figures ----

def pct(xs, p):
    """Nearest-rank percentile of `xs` (None when empty)."""
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100 * len(xs) + 0.5)) - 1))]


def floor(a):
    """Origin bytes per client byte of a cache of 1 MiB slices when no two reads share a
    slice: a read of READ bytes from a uniform offset touches READ / STEP slices, plus
    one unless it starts on a slice boundary."""
    aligned = ((a.object_size - READ) // STEP + 1) / (a.object_size - READ + 1)
    slices = READ // STEP + 1 - aligned
    return slices * STEP / READ


def figures(row):
    m, h = row.get("miss", {}), row.get("hit", {})
    return {
        "origin_per_client": m.get("origin_per_client"),
        "seek_ttfb_p50_ms": pct(m.get("seek_ttfb_ms"), 50),
        "seek_ttfb_p99_ms": pct(m.get("seek_ttfb_ms"), 99),
        "next_ttfb_p50_ms": pct(m.get("next_ttfb_ms"), 50),
        "next_ttfb_p99_ms": pct(m.get("next_ttfb_ms"), 99),
        "seek_hit_share": m["seek_hits"] / m["seeks"] if m.get("seeks") else None,
        "origin_mib": m["origin_bytes"] / MIB if m else None,
        "client_mib": m["client_bytes"] / MIB if m else None,
        "hit_rps": h.get("rps"),
        "cpu_per_hit_us": h.get("cpu_per_hit_us"),
        "kernel_per_hit_us": h.get("kernel_per_hit_us"),
        "hit_p99_ms": h["p99_us"] / 1e3 if h.get("p99_us") is not None else None,
        "disk_after_miss_mib": row["disk_after_miss"] / MIB if "disk_after_miss" in row
        else None,
        "disk_end_mib": row["disk_end"] / MIB if "disk_end" in row else None,
    }


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    xs.sort()
    return {"median": xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1]
                                                           + xs[len(xs) // 2]) / 2,
            "min": xs[0], "max": xs[-1], "n": len(xs)}


def summarize(rows):
    per = {srv: {r["rep"]: figures(r) for r in rows if r["server"] == srv}
           for srv in SERVERS}
    s = {}
    for srv in SERVERS:
        keys = next(iter(per[srv].values()), {}).keys()
        s[srv] = {k: spread([f[k] for f in per[srv].values()]) for k in keys}
    ratios = {"seek_ttfb_p99": [], "seek_ttfb_p50": [], "hit_rps": [], "cpu_per_hit": [],
              "kernel_vs_cpu": []}
    for rep, e in per["edgecache"].items():
        n = per["nginx"].get(rep)
        if not n:
            continue
        for key, fig in (("seek_ttfb_p99", "seek_ttfb_p99_ms"),
                         ("seek_ttfb_p50", "seek_ttfb_p50_ms"), ("hit_rps", "hit_rps"),
                         ("cpu_per_hit", "cpu_per_hit_us")):
            if e[fig] is not None and n[fig]:
                ratios[key].append(e[fig] / n[fig])
        # Our kernel time alone against nginx's whole CPU per hit: the floor no change
        # in our own code goes under.
        if e.get("kernel_per_hit_us") is not None and n.get("cpu_per_hit_us"):
            ratios["kernel_vs_cpu"].append(e["kernel_per_hit_us"] / n["cpu_per_hit_us"])
    s["edgecache_vs_nginx"] = {k: spread(v) for k, v in ratios.items()}
    return per, s


def shown(sp, fmt):
    if not sp:
        return "n/a"
    t = fmt.format(sp["median"])
    return t if sp["n"] == 1 else f"{t} ({fmt.format(sp['min'])}–{fmt.format(sp['max'])})"


def targets(s, no_slice):
    def verdict(sp, ok):
        if not sp:
            return "n/a"
        if no_slice:
            return "not applicable (before slicing)"
        return "pass" if ok(sp["median"]) else "FAIL"
    e, vs = s["edgecache"], s["edgecache_vs_nginx"]
    return [
        {"target": f"origin bytes per client byte <= {ORIGIN_PER_CLIENT_MAX}",
         "shown": shown(e.get("origin_per_client"), "{:.2f}"),
         "result": verdict(e.get("origin_per_client"), lambda x: x <= ORIGIN_PER_CLIENT_MAX)},
        {"target": f"seek-miss TTFB p99 <= {TTFB_P99_VS_NGINX_MAX}x nginx slice",
         "shown": shown(vs["seek_ttfb_p99"], "{:.2f}x"),
         "result": verdict(vs["seek_ttfb_p99"], lambda x: x <= TTFB_P99_VS_NGINX_MAX)},
        {"target": f"warm slice hits >= {HITS_VS_NGINX_MIN}x nginx",
         "shown": shown(vs["hit_rps"], "{:.2f}x"),
         "result": verdict(vs["hit_rps"], lambda x: x >= HITS_VS_NGINX_MIN)},
    ]


def versions():
    return benchlib.machine(EDGECACHE_BIN, need("nginx"))


def write_report(a, rows, problems, info, started):
    per, s = summarize(rows)
    tg = targets(s, a.no_slice)
    os.makedirs(a.out, exist_ok=True)
    md = os.path.join(a.out, "video.md")
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(started))
    cmd = "edgebench video" + ("".join(f" {x}" for x in a.argv))
    mode = ("**before slicing**: edgecache ran WITHOUT `slice` (`--no-slice`, the "
            "whole-object baseline: a Range miss fetches and stores the whole object); "
            "nginx ran with its slice module" if a.no_slice else
            f"edgecache with `slice = \"{SLICE}\"`, nginx with `slice {SLICE}`")
    with open(md, "w") as f:
        f.write(f"# edgebench video: seeks into {OBJECTS} objects of "
                f"{a.size_text.upper()}iB, edgecache against nginx slice"
                + (" (BEFORE SLICING: edgecache's whole-object baseline)" if a.no_slice
                   else "") + "\n\n")
        f.write(f"{when}, `{cmd}`{' (python3 bench/video.py)' if a.no_slice else ''}: "
                f"{mode}. {a.repetitions} repetition(s); servers on CPU "
                f"{a.cpus_text[0]}, clients on CPU {a.cpus_text[1]}; {CLIENTS} clients, "
                f"{a.seeks} seeks each of {READ // MIB} MiB in {STEP // MIB} MiB ranges; "
                f"hit phase {a.seconds} s (after {a.settle} s of it discarded) over a "
                f"{size_text(a.warm_span)} warm span per object.\n\n")
        f.write(f"edgecache `{info.get('edgecache')}`, nginx `{info.get('nginx')}`, "
                f"kernel {info.get('kernel')}, {info.get('cpu')}; load average "
                f"{info.get('load_start', 0):.1f} at the start, "
                f"{info.get('load_end', 0):.1f} at the end.\n\n")
        f.write("## Results\n\n| | edgecache | nginx slice |\n|---|---|---|\n")

        def line(label, key, fmt):
            f.write(f"| {label} | " + " | ".join(shown(s[srv].get(key), fmt)
                                                  for srv in SERVERS) + " |\n")
        line("**origin bytes per client byte**", "origin_per_client", "{:.2f}")
        f.write(f"| floor when no slice is shared | 1.00 (partial slices) | "
                f"{floor(a):.2f} (whole {SLICE} slices) |\n")
        line("origin MiB / client MiB (miss phase)", "origin_mib", "{:,.0f}")
        line("client MiB (miss phase)", "client_mib", "{:,.0f}")
        line("**seek-miss TTFB p50, ms**", "seek_ttfb_p50_ms", "{:.2f}")
        line("**seek-miss TTFB p99, ms**", "seek_ttfb_p99_ms", "{:.2f}")
        line("seeks whose first answer said HIT", "seek_hit_share", "{:.0%}")
        line("later reads TTFB p50, ms", "next_ttfb_p50_ms", "{:.2f}")
        line("later reads TTFB p99, ms", "next_ttfb_p99_ms", "{:.2f}")
        line("**hit req/s (1 MiB ranges, warm)**", "hit_rps", "{:,.0f}")
        line("CPU per hit, µs", "cpu_per_hit_us", "{:,.1f}")
        line("of which kernel, µs", "kernel_per_hit_us", "{:,.1f}")
        line("hit latency p99, ms", "hit_p99_ms", "{:.2f}")
        line("disk after the miss phase, MiB", "disk_after_miss_mib", "{:,.1f}")
        line("**disk at the end, MiB**", "disk_end_mib", "{:,.1f}")
        vs = s["edgecache_vs_nginx"]
        f.write(f"\nedgecache / nginx, per repetition: seek-miss TTFB p99 "
                f"{shown(vs['seek_ttfb_p99'], '{:.2f}x')}, p50 "
                f"{shown(vs['seek_ttfb_p50'], '{:.2f}x')}; hit req/s "
                f"{shown(vs['hit_rps'], '{:.2f}x')}; CPU per hit "
                f"{shown(vs['cpu_per_hit'], '{:.2f}x')} (our kernel time alone: "
                f"{shown(vs['kernel_vs_cpu'], '{:.2f}x')} nginx's CPU per hit). Every "
                "figure: median (min–max) over repetitions.\n\n")
        f.write("## Targets (issue 28)\n\n| target | measured | result |\n|---|---|---|\n")
        for t in tg:
            f.write(f"| {t['target']} | {t['shown']} | **{t['result']}** |\n")
        if a.no_slice:
            f.write("\nBefore slicing: edgecache ran the whole-object baseline, which the "
                    "targets are not about. Its seek TTFB is not a miss's: the first seek "
                    "into an object starts a fill of the whole object, and the later seeks "
                    "into it are served as that fill passes or from the stored object "
                    "(the HIT share above). `edgebench video` (with `slice`) is the "
                    "measurement once slicing lands.\n")
        f.write("\n## Per repetition\n\n| rep | server | origin/client | seek TTFB p50 / "
                "p99 ms | hit req/s | CPU/hit µs | disk MiB | X-Cache-Status (miss phase) "
                "| origin requests (miss) |\n|---|---|---|---|---|---|---|---|---|\n")
        for r in sorted(rows, key=lambda r: (r["rep"], r["server"])):
            fg = per[r["server"]].get(r["rep"], {})
            m = r.get("miss", {})

            def n(x, fmt):
                return "n/a" if x is None else fmt.format(x)
            f.write(f"| {r['rep']} | {r['server']} | {n(fg.get('origin_per_client'), '{:.2f}')}"
                    f" | {n(fg.get('seek_ttfb_p50_ms'), '{:.2f}')} / "
                    f"{n(fg.get('seek_ttfb_p99_ms'), '{:.2f}')} | "
                    f"{n(fg.get('hit_rps'), '{:,.0f}')} | "
                    f"{n(fg.get('cpu_per_hit_us'), '{:,.1f}')} | "
                    f"{n(fg.get('disk_end_mib'), '{:,.1f}')} | "
                    f"{', '.join(f'{k} {v}' for k, v in sorted(m.get('x_cache_status', {}).items())) or '–'}"
                    f" | {m.get('origin_requests', 'n/a')} |\n")
        hc = [r for r in rows if r.get("hit", {}).get("counters_per_hit")]
        if hc:
            names = [c.split(":")[-1] for c in COUNTERS]
            f.write("\nKernel events on the server CPUs per hit over the hit phase (`perf "
                    "stat -C`, `--counters`):\n\n| rep | server | " + " | ".join(names)
                    + " |\n|---|---|" + "---|" * len(names) + "\n")
            for r in sorted(hc, key=lambda r: (r["rep"], r["server"])):
                c = r["hit"]["counters_per_hit"]
                f.write(f"| {r['rep']} | {r['server']} | "
                        + " | ".join(f"{c[k]:.2f}" if k in c else "–" for k in names)
                        + " |\n")
        sm = [r for r in rows if r.get("slice_metrics")]
        if sm:
            f.write("\nedgecache's slice series on /metrics that moved over the miss phase: "
                    + "; ".join(f"rep {r['rep']}: " + ", ".join(
                        f"`{k}` {v:+,.0f}" for k, v in sorted(r["slice_metrics"].items())
                        if v) for r in sm) + ".\n")
        lh = [r for r in rows if r.get("large_hits")]
        if lh:
            f.write("\nedgecache's large hits after the hit phase (/status `large_hits`, per "
                    "worker: the way `sendfile_max = \"auto\"` chose, `measuring` while it "
                    "still measures; MiB sent each way since the start; the medians of its "
                    "last decision, worker CPU µs per MiB): " + "; ".join(
                        f"rep {r['rep']}: " + ", ".join(
                            f"{w['choice']} ({w['mapped_bytes'] / 2**20:,.0f} MiB mapped, "
                            f"{w['sendfile_bytes'] / 2**20:,.0f} MiB by sendfile; "
                            f"{(w.get('mapped_ns_per_mib') or 0) / 1e3:,.0f} µs mapped, "
                            f"{(w.get('sendfile_ns_per_mib') or 0) / 1e3:,.0f} µs sendfile)"
                            for w in r["large_hits"]) for r in lh) + ".\n")
        f.write("\n## How to read this\n\n" + " ".join(HOW_TO_READ.split()) + "\n\n")
        f.write("## Errors\n\n")
        f.write("".join(f"- {p}\n" for p in problems) if problems else
                "None: every read answered a 206 with the asked range, every HIT check "
                "passed, no origin request during a hit phase.\n")
        f.write("\n## Server logs\n\n")
        for srv in SERVERS:
            lines = [ln for r in rows if r["server"] == srv for ln in r.get("log", [])]
            if lines:
                f.write(f"{srv} ({len(lines)} lines, the last 20):\n\n```\n"
                        + "\n".join(lines[-20:]) + "\n```\n\n")
            else:
                f.write(f"{srv}: empty error log and stderr.\n\n")
        f.write("Raw figures: `video.json` next to this file.\n")
    doc = {"experiment": "video", "command": cmd, "started": when, "no_slice": a.no_slice,
           "before_slicing": a.no_slice, "machine": info,
           "config": {"objects": OBJECTS, "object_size": a.object_size, "clients": CLIENTS,
                      "seeks_per_client": a.seeks, "read": READ, "step": STEP,
                      "slice": SLICE, "warm_span": a.warm_span, "seconds": a.seconds,
                      "settle": a.settle, "repetitions": a.repetitions,
                      "cpus": {"server": a.server_cpus, "client": a.client_cpus}},
           "per_rep": per, "summary": s, "targets": tg, "problems": problems, "rows": rows}
    with open(os.path.join(a.out, "video.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return md


def parse_args():
    ap = argparse.ArgumentParser(description="Video seeks on huge objects, edgecache slice "
                                             "against nginx slice.")
    ap.add_argument("--quick", action="store_true",
                    help="1 repetition, 64 MiB objects, 2 seeks per client, 3 s hits")
    ap.add_argument("--seconds", type=int, help="length of the hit phase (default 10, 3 "
                                                "with --quick)")
    ap.add_argument("--settle", type=int,
                    help="seconds of the hit load, discarded, before each measured hit "
                         "phase (default 12, 0 with --quick)")
    ap.add_argument("--repetitions", "--reps", dest="repetitions", type=int,
                    help="repetitions (default 3, 1 with --quick)")
    ap.add_argument("--cpus", help="SERVER:CLIENT CPU lists (default: the first two CPUs "
                                   "this process may use, 0:1)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results"))
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    ap.add_argument("--nice", type=int, help="nice value of the servers and clients "
                                             "(default -10 as root, else 0)")
    ap.add_argument("--object-size", type=parse_size,
                    help="size of each object (default 2g; 64m with --quick; 256m with "
                         "--no-slice)")
    ap.add_argument("--seeks", type=int, help="seeks per client in the miss phase "
                                              "(default 8, 2 with --quick)")
    ap.add_argument("--warm-span", type=parse_size,
                    help="bytes at the start of each object the hit phase reads from "
                         "(default 64m, 16m with --quick)")
    ap.add_argument("--no-slice", action="store_true",
                    help="edgecache without `slice`: the whole-object baseline")
    ap.add_argument("--counters", action="store_true",
                    help="perf stat the server CPUs over each hit phase: syscalls, "
                         "hrtimer starts, softirqs, faults per hit (root)")
    ap.add_argument("--perf", metavar="DIR",
                    help="perf record -e cpu-clock -g on the server CPUs over each hit "
                         "phase, into DIR/<server>-<rep>.data (root)")
    ap.add_argument("--aio", action="append", default=[], metavar="KEY=VALUE",
                    help="a key of edgecache's [aio] table, the value as TOML "
                         "(--aio 'sendfile_max=\"off\"'); repeatable")
    ap.add_argument("--location", action="append", default=[], metavar="KEY=VALUE",
                    help="a key of edgecache's [[location]], the value as TOML "
                         "(--location slice_prefetch=1); repeatable")
    a = ap.parse_args()
    for opt in ("aio", "location"):
        pairs = [tuple(x.strip() for x in kv.split("=", 1)) for kv in getattr(a, opt)]
        if not all(len(kv) == 2 and kv[0] and kv[1] for kv in pairs):
            ap.error(f"--{opt} takes KEY=VALUE")
        setattr(a, opt, pairs)
    a.argv = (["--quick"] if a.quick else []) + [
        f"--{k.replace('_', '-')} {v}" for k, v in (
            ("seconds", a.seconds), ("settle", a.settle), ("repetitions", a.repetitions),
            ("cpus", a.cpus),
            ("object_size", a.object_size and size_text(a.object_size)), ("seeks", a.seeks),
            ("warm_span", a.warm_span and size_text(a.warm_span)), ("nice", a.nice))
        if v is not None] + (["--no-slice"] if a.no_slice else []) + [
        f"--aio '{k}={v}'" for k, v in a.aio] + [
        f"--location '{k}={v}'" for k, v in a.location] + (["--counters"] if a.counters else [])
    if a.perf:
        os.makedirs(a.perf, exist_ok=True)
    if a.nice is None:
        a.nice = -10 if os.geteuid() == 0 else 0
    if not -20 <= a.nice <= 19:
        ap.error("--nice must be -20..19")
    a.seconds = a.seconds or (3 if a.quick else 10)
    if a.settle is None:
        a.settle = 0 if a.quick else 12
    if not 0 <= a.settle <= 600:
        ap.error("--settle must be 0..600")
    a.repetitions = a.repetitions or (1 if a.quick else 3)
    a.seeks = a.seeks or (2 if a.quick else 8)
    a.object_size = a.object_size or ((64 << 20) if a.quick else (256 << 20) if a.no_slice
                                      else (2 << 30))
    a.warm_span = a.warm_span or min(a.object_size, (16 << 20) if a.quick else (64 << 20))
    if not 1 <= a.seconds <= 600 or not 1 <= a.repetitions <= 100:
        ap.error("--seconds must be 1..600 and --repetitions 1..100")
    if not 1 <= a.seeks <= 1000:
        ap.error("--seeks must be 1..1000")
    if a.object_size < READ or a.object_size % STEP:
        ap.error(f"--object-size must be a multiple of 1 MiB, at least {READ // MIB} MiB")
    if a.object_size > (1 << 40):
        ap.error("--object-size: edgeorigin serves objects up to 1 TiB")
    if not READ <= a.warm_span <= a.object_size or a.warm_span % STEP:
        ap.error(f"--warm-span must be a multiple of 1 MiB, from {READ // MIB} MiB up to "
                 "the object size")
    if a.no_slice and OBJECTS * a.object_size > NO_SLICE_DISK_MAX:
        ap.error(f"--no-slice stores every object whole: {OBJECTS} x "
                 f"{size_text(a.object_size)} is over {size_text(NO_SLICE_DISK_MAX)} of disk "
                 "per server; give a smaller --object-size")
    a.size_text = size_text(a.object_size)
    a.server_cpus, a.client_cpus = benchlib.server_client_cpus(ap, a.cpus, "video.py")
    a.cpus_text = (",".join(map(str, a.server_cpus)), ",".join(map(str, a.client_cpus)))
    a.nice_cmd = ["nice", "-n", str(a.nice)] if a.nice else []
    a.client_pin = a.nice_cmd + ["taskset", "-c", a.cpus_text[1]]
    return a


def main():
    a = parse_args()
    need("taskset")
    nginx = need("nginx")
    v = subprocess.run([nginx, "-V"], capture_output=True, text=True)
    if "--with-http_slice_module" not in v.stderr + v.stdout:
        raise SystemExit(f"video.py: {nginx} is built without the slice module")
    for b, path in (("edgecache", EDGECACHE_BIN), ("edgeorigin", os.path.join(BIN, "edgeorigin")),
                    ("edgeload", os.path.join(BIN, "edgeload"))):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"video.py: {path} missing; cargo build --release -p {b}")

    def unwind(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, unwind)
    signal.signal(signal.SIGHUP, unwind)

    work = tempfile.mkdtemp(prefix="video-", dir=os.environ.get("EDGEBENCH_WORK"))
    os.chmod(work, 0o755)
    started = time.time()
    origin = None
    rows, problems = [], []
    info = versions()
    info["load_start"] = os.getloadavg()[0]
    ok = False
    try:
        # The config is checked before anything runs (a build without `slice` says so).
        Server("edgecache", work, 0, 1, a).check()
        oport = free_port()
        with open(os.path.join(work, "origin.log"), "w") as olog:
            origin = subprocess.Popen(
                [os.path.join(BIN, "edgeorigin"), "--listen", f"127.0.0.1:{oport}",
                 "--max-age", "3600", "--threads", "2"],
                stdout=subprocess.DEVNULL, stderr=olog, start_new_session=True)
        wait_port(oport, timeout=20)
        # The clients of this process run on the client CPUs (the servers are pinned by
        # taskset, the origin by nothing: it was started before).
        os.sched_setaffinity(0, a.client_cpus)
        t0 = time.time()
        for oid in range(1, OBJECTS + 1):
            req = urllib.request.Request(f"http://127.0.0.1:{oport}/obj/{a.size_text}/{oid}",
                                         method="HEAD")
            urllib.request.urlopen(req, timeout=120).read()
        print(f"video.py: origin checksums of {OBJECTS} objects of {a.size_text} in "
              f"{time.time() - t0:.1f} s", file=sys.stderr)
        for rep in range(1, a.repetitions + 1):
            order = SERVERS if rep % 2 else SERVERS[::-1]
            for kind in order:
                s = Server(kind, work, rep, oport, a)
                s.check()
                row = run_server(s, a, oport, rep, work)
                rows.append(row)
                fg = figures(row)
                print(json.dumps({"server": kind, "rep": rep, **{
                    k: round(v, 3) if isinstance(v, float) else v for k, v in fg.items()},
                    "problems": row["problems"]}), file=sys.stderr, flush=True)
        ok = True
    finally:
        stop_group(origin)
        if not ok:
            print(f"video.py: stopped early; the run directory is kept: {work}",
                  file=sys.stderr)
    for r in rows:
        problems += [f"rep {r['rep']} {r['server']}: {p}" for p in r["problems"]]
    info["load_end"] = os.getloadavg()[0]
    md = write_report(a, rows, problems, info, started)
    if a.keep:
        print(f"run directory kept: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    with open(md) as f:
        print(f.read())


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("video.py: interrupted; every process it started is stopped", file=sys.stderr)
        sys.exit(130)
