#!/usr/bin/env python3
"""Request rate limits under attack: edgecache against nginx in the same run, one
attacker address at full speed next to 50 legitimate addresses, all on 1 KiB cache hits.

Usage: edgebench limits [--quick] [--duration 10s] [--repetitions 3] [--cpus 0:1]
                        [--out docs/results] [--keep], which runs
       python3 bench/limits.py [--quick] [--seconds 10] [--repetitions N | --reps N]
                               [--cpus SERVER:CLIENT] [--out docs/results] [--keep]
                               [--nice N] [--edgecache-limits auto|on|off] [--hold 1s]

Needs target/release/{edgecache,edgeorigin,edgeload} (`cargo build --release -p
edgecache -p edgeorigin -p edgeload`; `EDGEBENCH_EDGECACHE` overrides the edgecache
binary), nginx (Debian's; `EDGEBENCH_NGINX` overrides the path) and taskset; chrt when
run as root. `--quick`: one repetition of 3 s phases (an explicit --seconds or
--repetitions still wins). Everything listens on 127.0.0.1 and
every client connects there; the client addresses come from 127.0.0.0/8 (`edgeload
--source`), which Linux routes to the loopback interface without set-up.

The same limit on both servers: 100 requests/s per client address, burst 20, nodelay,
rejected with 429. nginx: `limit_req_zone $binary_remote_addr zone=perip:10m
rate=100r/s; limit_req zone=perip burst=20 nodelay; limit_req_status 429;` (plus
`limit_req_log_level info`, under the error log's `warn`, so that nginx does not write
an error-log line per rejection). edgecache (docs/config.md, "Limits and access"):
`[[limit_req_zone]] name = "perip", key = "$binary_remote_addr", rate = "100r/s", size =
"10m"` and on the location `limit_req = [{ zone = "perip", burst = 20, nodelay = true,
status = 429 }]`. Both run 2 workers (edgecache `workers = 2`, `accept = "reuseport"`;
nginx `worker_processes 2`, `listen ... reuseport`), so one address's connections land
on both workers and the limit must hold for the node. Both have a disk cache in the run
directory (edgecache without its RAM tier, as in `edgebench hits`), a keep-alive
upstream to edgeorigin (`--sizes 1k --count 100`), access logs off. Each has a second
virtual server, `hits.bench`, with the same cache and no limit: the plain-hit phase
measures it. The servers are pinned to the server CPUs, the load generators to the
client CPUs (`--cpus`, default 0:1), the origin to neither. Before the first phase every
object is fetched through both virtual servers (the limited one from 10 addresses at 20
requests/s each, under the limit), and /obj/1k/1 must then answer `X-Cache-Status: HIT`
on both.

Phases, each `--seconds` long, for each server in turn, in each of `--repetitions`
repetitions (the order of the servers alternates from one repetition to the next):

- hit: `edgeload -c16` closed loop with `Host: hits.bench` over the 100 objects: plain
  1 KiB hits, no limit; server CPU per hit.
- legit: the legitimate load alone: `edgeload -c50 -R1000 --source
  127.0.0.3-127.0.0.52`, 50 addresses, one connection each, 20 requests/s each, open
  loop (latency from the intended send times); its p99 without an attacker.
- attack: the same legitimate load, and at the same time the attacker: `edgeload -c16
  --source 127.0.0.2`, one address, closed loop at full speed. The attacker's accepted
  rate against the limit; the legitimate requests rejected (must be 0) and their p99.
- reject: the attacker alone, nearly every request rejected: server CPU per rejection.

The legitimate client runs in SCHED_FIFO (`chrt -f 1`, when root) so that the attacker
on the same client CPU does not delay its sends: the legit p99 is then the server's.
Servers and load generators run at nice -10 when root (`--nice`), so that other work on
a shared machine takes less of their CPUs.
Server CPU: utime+stime of every process and thread of the server's process group (and
of children it reaped) from /proc, before and after each phase. The origin's request
count is read around each phase (hits only: it must not move). edgecache's /status gives
each worker's requests (both workers must have served the attacker) and its /metrics
every `edgecache_limit_req*` series. Figures are medians over repetitions with the
min-max; a ratio is taken per repetition (the runs next to each other) before the
median. Writes `limits.md` and `limits.json` to --out.

`--edgecache-limits`: `on` gives edgecache the limit; `off` runs it without (a baseline:
the attacker is served in full); `auto` (default) asks `edgecache -t` whether the build
knows `limit_req_zone` and runs without it, saying so in the report, when it does not.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import benchlib
from benchlib import (ROOT, BIN, free_port, wait_port, get_json, group_cpu_split, cpu_busy,
                      stop_group, origin_requests, med, log_lines)

# EDGEBENCH_EDGECACHE overrides the edgecache binary alone, as for edgebench's own runs.
EDGECACHE_BIN = os.environ.get("EDGEBENCH_EDGECACHE") or os.path.join(BIN, "edgecache")
SERVERS = ["edgecache", "nginx"]
PHASES = ["hit", "legit", "attack", "reject"]
LIMIT_RPS = 100
BURST = 20
ZONE_SIZE = "10m"
IDS = 100
ATTACKER = "127.0.0.2"
LEGIT = "127.0.0.3-127.0.0.52"
LEGIT_ADDRS = 50
LEGIT_RATE_EACH = 20
WARM_SOURCES = "127.0.0.100-127.0.0.109"
ATTACK_CONNS = 16
HIT_CONNS = 16
HITS_HOST = "hits.bench"
WORKERS = 2
# nginx's per worker; edgecache's is left unset, sized to the descriptor limit.
WORKER_CONNECTIONS = 8192
# A phase where more than this share of the server CPUs went to something other than
# the server is flagged: something else ran there.
SHARED_CPU = 0.2
# Targets (issue 27).
RATE_TOLERANCE = 0.05
P99_MAX = 1.5
REJECT_VS_HIT_MAX = 0.5
REJECT_VS_NGINX_MAX = 0.7

EDGECACHE = benchlib.EDGECACHE_REUSEPORT_HEAD + """
# No RAM tier (on by default): hits come from the disk cache, as nginx's do and as in
# `edgebench hits`.
[memory_cache]
size = "off"

[[upstream]]
name = "origin"
servers = ["127.0.0.1:{origin}"]
keepalive = 16
{zone}
# The server under attack: every request from an address counts against its limit.
[[server]]
names = ["limited.bench"]
default = true

[[server.location]]
prefix = "/"
proxy = "origin"
cache = ["bench"]
cache_valid = {{ "200" = "10m" }}
{limit}
# Plain hits, no limit: the CPU a 1 KiB hit costs.
[[server]]
names = ["{hits_host}"]

[[server.location]]
prefix = "/"
proxy = "origin"
cache = ["bench"]
cache_valid = {{ "200" = "10m" }}
"""

EDGECACHE_ZONE = """
[[limit_req_zone]]
name = "perip"
key = "$binary_remote_addr"
rate = "{rate}r/s"
size = "{size}"
"""

EDGECACHE_LIMIT = ('limit_req = [{{ zone = "perip", burst = {burst}, nodelay = true, '
                   'status = 429{hold} }}]\n')
# `--hold`: edgecache's `hold` on the limit (nginx has none), as `, hold = "1s"`.
EDGECACHE_HOLD = ""

NGINX = """daemon off;
master_process on;
worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
    worker_connections {wconns};
}}

http {{
""" + benchlib.NGINX_HTTP_COMMON + """
    proxy_cache_path {dir}/cache levels=1:2 keys_zone=bench:64m max_size=4g inactive=1h use_temp_path=off;

    limit_req_zone $binary_remote_addr zone=perip:{size} rate={rate}r/s;
    limit_req_status 429;
    # Rejections are logged at info, below the error log's level: no line per rejection.
    limit_req_log_level info;

    upstream origin {{
        server 127.0.0.1:{origin};
        keepalive 16;
    }}

    server {{
        listen 127.0.0.1:{port} reuseport default_server;
        server_name limited.bench;

        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache bench;
            proxy_cache_valid 200 10m;
            add_header X-Cache-Status $upstream_cache_status;
            limit_req zone=perip burst={burst} nodelay;
        }}
    }}

    server {{
        listen 127.0.0.1:{port};
        server_name {hits_host};

        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache bench;
            proxy_cache_valid 200 10m;
            add_header X-Cache-Status $upstream_cache_status;
        }}
    }}
}}
"""


def need(tool):
    return benchlib.need(tool, "limits.py", " (sudo bench/peers/install.sh)")


def edgecache_config(s, limits):
    return EDGECACHE.format(
        workers=WORKERS, dir=s.dir, port=s.port, admin=s.admin, max_size="4g",
        origin=s.origin, hits_host=HITS_HOST,
        zone=EDGECACHE_ZONE.format(rate=LIMIT_RPS, size=ZONE_SIZE) if limits else "",
        limit=EDGECACHE_LIMIT.format(burst=BURST, hold=EDGECACHE_HOLD) if limits else "")


def nginx_config(s):
    return NGINX.format(workers=WORKERS, wconns=WORKER_CONNECTIONS, dir=s.dir, port=s.port,
                        origin=s.origin, size=ZONE_SIZE, rate=LIMIT_RPS, burst=BURST,
                        hits_host=HITS_HOST)


class Server:
    def __init__(self, kind, work, origin, cpus, limits, nice):
        self.kind = kind
        self.dir = os.path.join(work, kind)
        os.makedirs(self.dir)
        # nginx's workers run as an unprivileged user: they must be able to write here.
        os.chmod(self.dir, 0o777)
        self.port = free_port()
        self.admin = free_port() if kind == "edgecache" else None
        self.origin = origin
        self.cpus = cpus
        self.limits = limits
        self.nice = nice
        text = edgecache_config(self, limits) if kind == "edgecache" else nginx_config(self)
        self.cfg = os.path.join(self.dir, "edgecache.toml" if kind == "edgecache" else "nginx.conf")
        with open(self.cfg, "w") as f:
            f.write(text)
        self.proc = None

    def start(self):
        pin = self.nice + ["taskset", "-c", ",".join(map(str, self.cpus))]
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
            raise SystemExit(f"limits.py: {self.kind} did not start:\n{self.log_tail()}")

    def stop(self):
        stop_group(self.proc)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def cpu(self):
        """(user, system) CPU seconds so far."""
        return group_cpu_split(self.proc.pid)

    def workers(self):
        """edgecache: each worker's request count so far (None for nginx)."""
        if not self.admin:
            return None
        try:
            st = get_json(self.admin, "/status", timeout=5)
            return [w.get("requests", 0) for w in st.get("workers", [])]
        except (OSError, ValueError):
            return None

    def limit_metrics(self):
        """edgecache: every `edgecache_limit_req*` series of /metrics (None for nginx)."""
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
            if ln.startswith("edgecache_limit_req"):
                name, _, value = ln.rpartition(" ")
                try:
                    got[name] = float(value)
                except ValueError:
                    pass
        return got

    def log_lines(self):
        return log_lines(self.dir)

    def log_tail(self, n=20):
        return "\n".join(self.log_lines()[-n:])


def edgecache_knows_limits(work):
    """(True, "") when this edgecache build accepts limit_req_zone (`-t`), else (False,
    the reason)."""
    d = os.path.join(work, "probe")
    os.makedirs(d)

    class Probe:
        pass
    p = Probe()
    p.dir, p.port, p.admin, p.origin = d, free_port(), free_port(), free_port()
    cfg = os.path.join(d, "edgecache.toml")
    with open(cfg, "w") as f:
        f.write(edgecache_config(p, True))
    r = subprocess.run([EDGECACHE_BIN, "-t", "-c", cfg],
                       capture_output=True, text=True, timeout=30)
    if r.returncode == 0:
        return True, ""
    msg = (r.stderr + r.stdout).strip()
    if "limit_req" in msg:
        first = msg.splitlines()[0].split(";")[0]
        return False, re.sub(r"\S+\.toml:\d+: ", "", first)
    raise SystemExit(f"limits.py: edgecache -t refuses the generated config (exit "
                     f"{r.returncode}):\n{msg}\n(config: {cfg})")


def run_clients(clients, timeout):
    """Starts every (name, cmd, log) at once, each in its own process group; waits for
    all (each killed after `timeout` s, and all of them on an error or Ctrl-C); returns
    {name: (exit code, output)}."""
    procs = {}
    out = {}
    try:
        for name, cmd, log in clients:
            f = open(log, "w")
            procs[name] = (subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                            start_new_session=True), f, log)
        end = time.time() + timeout
        for name, (p, f, log) in procs.items():
            try:
                rc = p.wait(max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                stop_group(p, grace=1)
                rc = f"killed after {timeout} s"
            out[name] = rc
    finally:
        for name, (p, f, log) in procs.items():
            if p.poll() is None:
                stop_group(p, grace=1)
            f.close()
    res = {}
    for name, (p, f, log) in procs.items():
        with open(log, errors="replace") as fh:
            res[name] = (out.get(name), fh.read())
    return res


def summarize(js):
    """The figures of one edgeload JSON that the report uses."""
    with open(js) as f:
        r = json.load(f)
    status = {k: int(v) for k, v in r.get("status", {}).items()}
    ok = sum(n for s, n in status.items() if s.startswith(("2", "3")))
    lat = r.get("latency_us", {})
    return {
        "requests": r["requests"], "duration_s": r["duration_s"], "rps": r["rps"],
        "status": status, "ok": ok, "rejected": status.get("429", 0),
        "other_status": sum(n for s, n in status.items()
                            if not s.startswith(("2", "3")) and s != "429"),
        "errors": sum(v for k, v in r["errors"].items() if k != "status"),
        "error_kinds": {k: v for k, v in r["errors"].items() if v and k != "status"},
        "connections_opened": r.get("connections_opened"),
        "connections": r.get("connections"),
        "p50_us": lat.get("p50"), "p99_us": lat.get("p99"), "p999_us": lat.get("p99.9"),
        "max_us": lat.get("max"), "mean_us": lat.get("mean"),
    }


class Plan:
    """Client command lines (all aimed at 127.0.0.1)."""

    def __init__(self, a, work, prio, nice):
        self.a = a
        self.work = work
        self.prio = prio
        self.threads = max(1, len(a.client_cpus))
        self.pin = nice + ["taskset", "-c", ",".join(map(str, a.client_cpus))]

    def edgeload(self, *args):
        return [os.path.join(BIN, "edgeload"), *args]

    def url(self, s):
        return f"http://127.0.0.1:{s.port}/obj/1k"

    def hit(self, s, js):
        return self.pin + self.edgeload(
            "-t", str(self.threads), "-c", str(HIT_CONNS), "-d", f"{self.a.seconds}s",
            "-H", f"Host: {HITS_HOST}", "--paths", str(IDS), "--json", js, self.url(s))

    def legit(self, s, js):
        return self.pin + self.prio + self.edgeload(
            "-t", "1", "-c", str(LEGIT_ADDRS), "-R", str(LEGIT_ADDRS * LEGIT_RATE_EACH),
            "-d", f"{self.a.seconds}s", "--source", LEGIT, "--paths", str(IDS),
            "--json", js, self.url(s))

    def attacker(self, s, js):
        return self.pin + self.edgeload(
            "-t", str(self.threads), "-c", str(ATTACK_CONNS), "-d", f"{self.a.seconds}s",
            "--source", ATTACKER, "--paths", str(IDS), "--json", js, self.url(s))

    def clients(self, phase, s, rep):
        base = os.path.join(self.work, f"{phase}-{s.kind}-{rep}")
        roles = {"hit": ["hits"], "legit": ["legit"], "attack": ["attacker", "legit"],
                 "reject": ["attacker"]}[phase]
        make = {"hits": self.hit, "legit": self.legit, "attacker": self.attacker}
        return [(role, make[role](s, f"{base}-{role}.json"), f"{base}-{role}.log")
                for role in roles]


def warm(s, work):
    """Every object once through both virtual servers; then /obj/1k/1 must be a HIT on
    both. The limited server is filled from 10 addresses at 20 requests/s each."""
    problems = []
    runs = {
        "limited": [os.path.join(BIN, "edgeload"), "-t", "1", "-c", "10", "-R", "200",
                    "--source", WARM_SOURCES, "-d", "60s", "-T", "10s", "--paths", str(IDS),
                    "--sequential", "--requests", str(IDS)],
        "hits": [os.path.join(BIN, "edgeload"), "-t", "1", "-c", "4", "-d", "60s", "-T",
                 "10s", "-H", f"Host: {HITS_HOST}", "--paths", str(IDS), "--sequential",
                 "--requests", str(IDS)],
    }
    for name, cmd in runs.items():
        js = os.path.join(work, f"warm-{s.kind}-{name}.json")
        res = run_clients([(name, cmd + ["--json", js, f"http://127.0.0.1:{s.port}/obj/1k"],
                            js + ".log")], timeout=90)
        rc, out = res[name]
        if rc != 0 or not os.path.exists(js):
            problems.append(f"warm-up of {name} failed (exit {rc}): {out.strip()[-300:]}")
            continue
        try:
            r = summarize(js)
        except (OSError, ValueError, KeyError) as e:
            problems.append(f"warm-up of {name}: no readable JSON: {e}")
            continue
        if r["ok"] != IDS or r["errors"] or r["rejected"] or r["other_status"]:
            problems.append(f"warm-up of {name}: {r['ok']} of {IDS} answered 2xx, "
                            f"{r['rejected']} 429, {r['other_status']} other statuses, "
                            f"{r['errors']} errors")
    for name, host in (("limited", None), ("hits", HITS_HOST)):
        req = urllib.request.Request(f"http://127.0.0.1:{s.port}/obj/1k/1")
        if host:
            req.add_header("Host", host)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                cache = r.headers.get("X-Cache-Status") or "no header"
                r.read()
        except OSError as e:
            cache = f"error: {e}"
        if cache != "HIT":
            problems.append(f"/obj/1k/1 on the {name} server: X-Cache-Status {cache}, not HIT")
    return problems


def measure(plan, phase, s, rep, oport):
    clients = plan.clients(phase, s, rep)
    o0 = origin_requests(oport)
    w0, m0 = s.workers(), s.limit_metrics()
    b0 = cpu_busy()
    c0 = s.cpu()
    t0 = time.time()
    res = run_clients(clients, timeout=plan.a.seconds + 30)
    wall = time.time() - t0
    c1 = s.cpu() if s.alive() else None
    user = round(c1[0] - c0[0], 3) if c1 is not None else None
    system = round(c1[1] - c0[1], 3) if c1 is not None else None
    b1 = cpu_busy()
    w1, m1 = s.workers(), s.limit_metrics()
    o1 = origin_requests(oport)
    row = {"phase": phase, "server": s.kind, "rep": rep, "limits": s.limits,
           "cpu_s": round(user + system, 3) if c1 is not None else None,
           "cpu_user_s": user, "cpu_system_s": system, "wall_s": round(wall, 3),
           "cpu_busy_s": {str(c): round(b1[c][0] - b0[c][0], 3) for c in sorted(b1) if c in b0},
           "origin_fetches": o1 - o0, "problems": [], "warnings": []}
    if w0 is not None and w1 is not None and len(w0) == len(w1):
        row["worker_requests"] = [b - a for a, b in zip(w0, w1)]
    if m0 is not None and m1 is not None and (m0 or m1):
        row["limit_metrics"] = {k: v - m0.get(k, 0) for k, v in m1.items()}
    if not s.alive():
        row["problems"].append(f"{s.kind} exited during the phase: {s.log_tail(5)}")
    for role, cmd, log in clients:
        rc, out = res[role]
        js = cmd[cmd.index("--json") + 1]
        if rc != 0:
            row["problems"].append(f"{role} client exited ({rc}): {out.strip()[-300:]}")
        try:
            row[role] = summarize(js)
        except (OSError, ValueError, KeyError) as e:
            row["problems"].append(f"no readable JSON from the {role} client: {e}")
    check(row, plan.a)
    return row


def check(row, a):
    """Problems (errors) and warnings of one phase."""
    phase = row["phase"]
    for role in ("hits", "legit", "attacker"):
        c = row.get(role)
        if not c:
            continue
        if c["errors"]:
            row["problems"].append(f"{role}: {c['errors']} failed requests {c['error_kinds']}")
        if c["other_status"]:
            row["problems"].append(f"{role}: {c['other_status']} answers neither 2xx/3xx "
                                   f"nor 429: {c['status']}")
        if role in ("hits", "legit") and c["rejected"]:
            row["problems"].append(f"{role}: {c['rejected']} requests rejected (429)")
    if row["origin_fetches"]:
        row["problems"].append(f"{row['origin_fetches']} origin fetches (not all hits)")
    att = row.get("attacker")
    if att and att["connections_opened"] and att["connections"] \
            and att["connections_opened"] > att["connections"]:
        row["warnings"].append(
            f"the attacker opened {att['connections_opened']} connections for "
            f"{att['connections']}: the server closed connections (after rejections?), and "
            "each reconnect costs an accept and a handshake")
    srv_rejected = server_rejected(row)
    clients = [row[r] for r in ("attacker", "legit") if row.get(r)]
    if clients and srv_rejected is not None:
        got = sum(c["rejected"] for c in clients)
        # Responses in flight when a client stops are counted by the server only.
        slack = sum(c["connections"] or 0 for c in clients) * 2 + got // 100
        if abs(srv_rejected - got) > slack:
            row["problems"].append(f"edgecache counted {srv_rejected:,.0f} rejections "
                                   f"(/metrics), the clients {got:,} 429s")
    wr = row.get("worker_requests")
    if phase in ("attack", "reject") and wr and len(wr) > 1 and min(wr) == 0:
        row["warnings"].append(f"one edgecache worker served none of the requests "
                               f"({wr}): the node-wide limit was not exercised")
    if row["cpu_s"] is not None and row["wall_s"]:
        busy = sum(row["cpu_busy_s"].get(str(c), 0) for c in a.server_cpus) / row["wall_s"]
        own = row["cpu_s"] / row["wall_s"]
        # Cores of the server CPUs that went to other processes (summed up in one
        # warning for the whole run by `shared_cpu_warning`).
        row["others_cores"] = round(busy - own, 3)


def server_rejected(row):
    """edgecache's rejections over the phase: the increase of the `result="rejected"`
    series of `edgecache_limit_req_total` (None when it has none: nginx, no limits)."""
    m = row.get("limit_metrics")
    if not m:
        return None
    got = [v for k, v in m.items() if k.startswith("edgecache_limit_req_total{")
           and 'result="rejected"' in k]
    return sum(got) if got else None


def shared_cpu_warning(rows, a):
    """One warning for the phases where other processes took more than SHARED_CPU of
    the server CPUs (each phase's figure is `others_cores` in the JSON)."""
    over = [r for r in rows if r.get("others_cores") is not None
            and r["others_cores"] > SHARED_CPU * len(a.server_cpus)]
    if not over:
        return []
    xs = [r["others_cores"] for r in over]
    return [f"in {len(over)} of {len(rows)} phases other processes (or softirq work outside "
            f"the servers' time) took more than {SHARED_CPU:.0%} of the server CPUs: "
            f"{statistics.median(xs):.2f} cores in the median, {max(xs):.2f} at most "
            "(`others_cores` per phase in limits.json)"
            + (f". The servers ran at nice {a.nice}, ahead of them, but their latencies "
               "still include waits for those processes' time slices." if a.nice < 0
               else ": the servers competed with them for CPU time.")]


# ---- derived figures ----

def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def row_of(rows, srv, phase, rep):
    for r in rows:
        if r["server"] == srv and r["phase"] == phase and r["rep"] == rep:
            return r
    return None


def reps_of(rows):
    return sorted({r["rep"] for r in rows})


def accepted_rps(r):
    """The attacker's accepted requests per second over the attack phase: raw, and
    sustained (less the initial burst the bucket holds when the phase starts)."""
    c = r.get("attacker") if r else None
    if not c or not c["duration_s"]:
        return None, None
    return c["ok"] / c["duration_s"], max(0, c["ok"] - BURST) / c["duration_s"]


def per_rep(rows, srv):
    """Per repetition, the figures of one server."""
    out = []
    for rep in reps_of(rows):
        hit, legit, attack, reject = (row_of(rows, srv, p, rep) for p in PHASES)
        f = {"rep": rep}
        raw, sustained = accepted_rps(attack)
        f["attacker_accepted_rps"] = raw
        f["attacker_sustained_rps"] = sustained
        a = attack.get("attacker") if attack else None
        f["attacker_rps"] = a["rps"] if a else None
        f["attacker_rejected"] = a["rejected"] if a else None
        lr = 0
        for r in (legit, attack):
            c = r.get("legit") if r else None
            if c:
                lr += c["rejected"] + c["other_status"] + c["errors"]
        f["legit_rejected"] = lr
        la = attack.get("legit") if attack else None
        l0 = legit.get("legit") if legit else None
        f["legit_p99_alone_us"] = l0["p99_us"] if l0 else None
        f["legit_p99_attack_us"] = la["p99_us"] if la else None
        f["legit_p99_ratio"] = (la["p99_us"] / l0["p99_us"]
                                if la and l0 and l0["p99_us"] else None)
        h = hit.get("hits") if hit else None
        f["hit_rps"] = h["rps"] if h else None
        f["cpu_per_hit_us"] = (hit["cpu_s"] * 1e6 / h["ok"]
                               if h and h["ok"] and hit["cpu_s"] is not None else None)
        rj = reject.get("attacker") if reject else None
        f["reject_rps"] = (rj["rejected"] / rj["duration_s"]
                           if rj and rj["duration_s"] else None)
        f["reject_accepted"] = rj["ok"] if rj else None
        f["cpu_per_reject_us"] = (reject["cpu_s"] * 1e6 / rj["rejected"]
                                  if rj and rj["rejected"] and reject["cpu_s"] is not None
                                  else None)
        f["reject_kernel_share"] = (reject["cpu_system_s"] / reject["cpu_s"]
                                    if reject and reject.get("cpu_system_s") is not None
                                    and reject["cpu_s"] else None)
        f["cpu_per_reject_kernel_us"] = (
            reject["cpu_system_s"] * 1e6 / rj["rejected"]
            if rj and rj["rejected"] and reject.get("cpu_system_s") is not None else None)
        f["reject_vs_hit"] = (f["cpu_per_reject_us"] / f["cpu_per_hit_us"]
                              if f["cpu_per_reject_us"] and f["cpu_per_hit_us"] else None)
        f["server_cores_reject"] = (reject["cpu_s"] / reject["wall_s"]
                                    if reject and reject["cpu_s"] is not None else None)
        f["server_cores_hit"] = (hit["cpu_s"] / hit["wall_s"]
                                 if hit and hit["cpu_s"] is not None else None)
        out.append(f)
    return out


def summary(rows):
    figs = {srv: per_rep(rows, srv) for srv in SERVERS}
    s = {}
    for srv in SERVERS:
        s[srv] = {k: spread([f[k] for f in figs[srv]])
                  for k in (figs[srv][0].keys() if figs[srv] else []) if k != "rep"}
        s[srv]["legit_rejected_total"] = sum(f["legit_rejected"] or 0 for f in figs[srv])
    vs, floor = [], []
    for f in figs["edgecache"]:
        g = next((x for x in figs["nginx"] if x["rep"] == f["rep"]), None)
        if g and f["cpu_per_reject_us"] and g["cpu_per_reject_us"]:
            vs.append(f["cpu_per_reject_us"] / g["cpu_per_reject_us"])
            if f["cpu_per_reject_kernel_us"] is not None:
                floor.append(f["cpu_per_reject_kernel_us"] / g["cpu_per_reject_us"])
    s["reject_edgecache_vs_nginx"] = spread(vs)
    # What the ratio would be if edgecache's own code cost nothing: its kernel time per
    # rejection against nginx's whole CPU per rejection.
    s["reject_kernel_edgecache_vs_nginx"] = spread(floor)
    return figs, s


def targets(s, limits):
    """Each claim of the issue: the measured figure and met / missed / not measured."""
    out = []
    no = None if limits else "edgecache ran without limit_req"

    def add(label, srv, value, ok, shown, why=None):
        state = ("not measured" + (f" ({why})" if why else "")) if value is None or why \
            else ("met" if ok else "missed")
        out.append({"target": label, "server": srv, "value": value, "shown": shown,
                    "result": state})
    lo, hi = LIMIT_RPS * (1 - RATE_TOLERANCE), LIMIT_RPS * (1 + RATE_TOLERANCE)
    for srv in SERVERS:
        why = no if srv == "edgecache" else None
        v = (s[srv].get("attacker_sustained_rps") or {}).get("median")
        add(f"attacker's accepted rate within ±5% of {LIMIT_RPS} r/s, {WORKERS} workers",
            srv, v, v is not None and lo <= v <= hi,
            f"{v:.1f} r/s" if v is not None else "n/a", why)
        n = s[srv]["legit_rejected_total"]
        have = s[srv].get("legit_p99_ratio") is not None
        add("0 legitimate requests rejected", srv, n if have else None, n == 0,
            f"{n}", why)
        v = (s[srv].get("legit_p99_ratio") or {}).get("median")
        add(f"legitimate p99 under attack ≤ {P99_MAX}× without the attacker", srv, v,
            v is not None and v <= P99_MAX, f"{v:.2f}×" if v is not None else "n/a", why)
        v = (s[srv].get("reject_vs_hit") or {}).get("median")
        add(f"CPU per rejection ≤ {REJECT_VS_HIT_MAX}× CPU per 1 KiB hit", srv, v,
            v is not None and v <= REJECT_VS_HIT_MAX,
            f"{v:.2f}×" if v is not None else "n/a", why)
    v = (s.get("reject_edgecache_vs_nginx") or {}).get("median")
    add(f"CPU per rejection ≤ {REJECT_VS_NGINX_MAX}× nginx's", "edgecache", v,
        v is not None and v <= REJECT_VS_NGINX_MAX,
        f"{v:.2f}×" if v is not None else "n/a", no)
    return out


# ---- the report ----

HOW_TO_READ = """
The attacker's **sustained** accepted rate is (accepted − burst) / phase length: a
limiter with burst 20 lets 20 requests through at once when the attacker starts (its
bucket is full after a pause), then admits the rate; the raw accepted rate, with the
burst, is shown next to it (the burst adds 20 / phase length to it: 2 r/s over 10 s).
Legitimate addresses send 20 requests/s each, evenly spaced, a fifth of the limit, so
any 429 they get is the limiter's error. The legit p99 counts from each request's
intended send time (open loop), so a server that falls behind is charged for the wait.
With both workers of a server on one CPU (the default on a 2-CPU machine, `--cpus 0:1`),
a legitimate request that reaches the worker that is not running waits for the other
worker's time slice under attack: the p99 ratio then measures the scheduler as much as
the limiter, for both servers alike; give the server two CPUs (`--cpus 0-1:2`) to take
that out. CPU per rejection is the server's CPU time over the reject phase divided by
the requests it rejected there (the few it accepted, 100/s, are in the time too); CPU
per hit is the same over the hit phase, where nothing is limited. Server CPU counts
every thread and process of the server and the kernel's work on their behalf (system
calls; softirq work when it ran in their context), split into user and kernel (system)
time as /proc reports them, sampled at the clock tick. Compare ratios from one run; absolute
figures move with the machine and with whatever else runs on it.
"""


def fmt_us(v):
    return "n/a" if v is None else f"{v:,.1f}"


def write_report(a, rows, problems, warnings, logs, info, started, limits, limits_note):
    os.makedirs(a.out, exist_ok=True)
    figs, s = summary(rows)
    tg = targets(s, limits)
    cmd = " ".join(["python3 bench/limits.py"] + a.argv)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    md = os.path.join(a.out, "limits.md")
    with open(md, "w") as f:
        f.write("# Rate limits under attack: edgecache against nginx\n\n")
        f.write(f"Produced by `edgebench limits`, which ran `{cmd}` on {when}: "
                f"{a.repetitions} repetition(s) of {a.seconds} s phases.\n\n")
        f.write(f"- Machine: {info['cpu']}, Linux {info['kernel']}; every process on "
                f"loopback; the servers on CPU {a.cpus_text[0]}, the load generators on "
                f"CPU {a.cpus_text[1]}, the origin unpinned; servers and load generators "
                f"at nice {a.nice}.\n")
        f.write(f"- Versions: {info['edgecache']}; "
                f"{info['nginx'].replace('nginx version: ', '')}.\n")
        f.write(f"- Limit: {LIMIT_RPS} requests/s per address, burst {BURST}, nodelay, "
                f"429; {WORKERS} workers per server. Attacker: 1 address ({ATTACKER}), "
                f"{ATTACK_CONNS} connections, closed loop. Legitimate: {LEGIT_ADDRS} "
                f"addresses ({LEGIT}), one connection each, {LEGIT_RATE_EACH} requests/s "
                f"each, open loop, the client in {a.prio_text}. Objects: {IDS} × 1 KiB, all cache hits.\n")
        if limits:
            f.write("- edgecache: with `limit_req` (the build's `-t` accepts "
                    "`[[limit_req_zone]]`).\n")
        else:
            f.write(f"- **edgecache ran without `limit_req`** ({limits_note}): its rows are "
                    "a baseline (the attacker is served in full) and its targets are not "
                    "measured. Rerun once the build has the limits.\n")
        f.write("\n" + __doc__.split("\n\n", 3)[3].split("\n\nThe legitimate client")[0]
                + "\n\n")

        f.write("## Summary\n\n")
        f.write("| | edgecache | nginx |\n|---|---|---|\n")

        def line(label, key, fmt):
            f.write(f"| {label} | " + " | ".join(
                med([x[key] for x in figs[srv]], fmt) for srv in SERVERS) + " |\n")
        line(f"attacker accepted, sustained, r/s (limit {LIMIT_RPS})",
             "attacker_sustained_rps", "{:.1f}")
        line("attacker accepted, raw (with the burst), r/s", "attacker_accepted_rps",
             "{:.1f}")
        line("attacker requests/s (accepted + rejected)", "attacker_rps", "{:,.0f}")
        f.write("| legitimate requests rejected or failed (all phases) | " + " | ".join(
            str(s[srv]["legit_rejected_total"]) for srv in SERVERS) + " |\n")
        line("legit p99 alone, µs", "legit_p99_alone_us", "{:,.0f}")
        line("legit p99 under attack, µs", "legit_p99_attack_us", "{:,.0f}")
        line("**legit p99 under attack / alone**", "legit_p99_ratio", "{:.2f}")
        line("1 KiB hits, req/s (hit phase)", "hit_rps", "{:,.0f}")
        line("CPU per 1 KiB hit, µs", "cpu_per_hit_us", "{:,.2f}")
        line("rejections/s (reject phase)", "reject_rps", "{:,.0f}")
        line("CPU per rejection, µs", "cpu_per_reject_us", "{:,.2f}")
        line("CPU per rejection in the kernel, µs", "cpu_per_reject_kernel_us", "{:,.2f}")
        line("kernel share of CPU per rejection", "reject_kernel_share", "{:.0%}")
        line("**CPU per rejection / per hit**", "reject_vs_hit", "{:.2f}")

        def ratio_text(key):
            vs = s.get(key)
            if not vs:
                return "n/a"
            return f"{vs['median']:.2f}" + (f" ({vs['min']:.2f}–{vs['max']:.2f})"
                                             if vs["n"] > 1 else "")
        f.write(f"| **CPU per rejection, edgecache / nginx** | "
                f"{ratio_text('reject_edgecache_vs_nginx')} | 1 |\n")
        f.write(f"| edgecache's kernel time per rejection / nginx's CPU per rejection "
                f"(the ratio if edgecache's own code cost nothing) | "
                f"{ratio_text('reject_kernel_edgecache_vs_nginx')} | – |\n")
        f.write("\nEvery figure: median (min–max) over repetitions; a ratio is taken per "
                "repetition, then the median.\n\n")

        f.write("## Targets (issue 27)\n\n| target | server | measured | result |\n"
                "|---|---|---|---|\n")
        for t in tg:
            f.write(f"| {t['target']} | {t['server']} | {t['shown']} | "
                    f"**{t['result']}** |\n")
        f.write("\nThe targets are edgecache's; nginx's rows say what nginx gives under the "
                "same load and limit.\n\n")

        f.write("## Phases\n\n")
        f.write("| phase | server | client | req/s | 2xx | 429 | other / failed | p50 µs | "
                "p99 µs | p99.9 µs | server CPU, cores | conns opened | worker requests |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for phase in PHASES:
            for srv in SERVERS:
                pr = [r for r in rows if r["phase"] == phase and r["server"] == srv]
                if not pr:
                    continue
                roles = [x for x in ("hits", "legit", "attacker") if any(x in r for r in pr)]
                for role in roles:
                    cs = [r[role] for r in pr if role in r]
                    cores = med([r["cpu_s"] / r["wall_s"] if r["cpu_s"] is not None
                                 and r["wall_s"] else None for r in pr], "{:.2f}")
                    wr = "; ".join("/".join(f"{n:,}" for n in r["worker_requests"])
                                   for r in pr if r.get("worker_requests")) or "–"
                    f.write(f"| {phase} | {srv} | {role} | "
                            f"{med([c['rps'] for c in cs], '{:,.0f}')} | "
                            f"{med([c['ok'] for c in cs], '{:,.0f}')} | "
                            f"{med([c['rejected'] for c in cs], '{:,.0f}')} | "
                            f"{sum(c['other_status'] + c['errors'] for c in cs)} | "
                            f"{med([c['p50_us'] for c in cs], '{:,.0f}')} | "
                            f"{med([c['p99_us'] for c in cs], '{:,.0f}')} | "
                            f"{med([c['p999_us'] for c in cs], '{:,.0f}')} | "
                            f"{cores} | "
                            f"{med([c['connections_opened'] for c in cs], '{:,.0f}')} | "
                            f"{wr if srv == 'edgecache' else '–'} |\n")
        f.write("\nWorker requests: each edgecache worker's requests over the phase "
                "(/status), one `a/b` per repetition; both must be non-zero under attack "
                "for the limit to be tested across workers.\n\n")
        lm = [r for r in rows if r.get("limit_metrics") and r["phase"] in ("attack", "reject")]
        if lm:
            f.write("edgecache's own count: the `edgecache_limit_req*` series of /metrics "
                    "that moved over the phase, against the attacker's 429s: "
                    + "; ".join(
                        f"{r['phase']} rep {r['rep']}: " + (", ".join(
                            f"`{k}` {v:+,.0f}" for k, v in sorted(r["limit_metrics"].items())
                            if v) or "none") + f" (client: {r['attacker']['rejected']:,} 429)"
                        for r in lm if r.get("attacker")) + ".\n\n")

        f.write("## How to read this\n\n" + " ".join(HOW_TO_READ.split()) + "\n\n")
        f.write("## Errors\n\n")
        f.write("".join(f"- {p}\n" for p in problems) if problems else
                "None: no failed request, no unexpected status, no origin fetch during a "
                "phase, every HIT check passed.\n")
        f.write("\n## Warnings\n\n")
        f.write("".join(f"- {w}\n" for w in warnings) if warnings else
                f"None: in no phase did other processes take more than {SHARED_CPU:.0%} of "
                "the server CPUs.\n")
        f.write("\n## Server logs\n\n")
        for srv in SERVERS:
            lines = logs.get(srv, [])
            if lines:
                f.write(f"{srv} ({len(lines)} lines, the last 20):\n\n```\n"
                        + "\n".join(lines[-20:]) + "\n```\n\n")
            else:
                f.write(f"{srv}: empty error log and stderr.\n\n")
        f.write("Raw figures: `limits.json` next to this file.\n")
    doc = {"experiment": "limits", "command": cmd, "started": when,
           "seconds": a.seconds, "repetitions": a.repetitions, "machine": info,
           "cpus": {"server": a.server_cpus, "client": a.client_cpus},
           "legit_priority": a.prio_text, "nice": a.nice,
           "config": {"limit_rps": LIMIT_RPS, "burst": BURST, "nodelay": True,
                      "status": 429, "zone_size": ZONE_SIZE, "workers": WORKERS,
                      "attacker": ATTACKER, "attacker_connections": ATTACK_CONNS,
                      "legit": LEGIT, "legit_addresses": LEGIT_ADDRS,
                      "legit_rate_each": LEGIT_RATE_EACH, "objects": IDS,
                      "object_size": 1024, "edgecache_limits": limits,
                      "edgecache_limits_note": limits_note},
           "per_rep": figs, "summary": s, "targets": tg, "problems": problems,
           "warnings": warnings, "rows": rows}
    with open(os.path.join(a.out, "limits.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return md


def versions():
    return benchlib.machine(EDGECACHE_BIN, need("nginx"))


def legit_priority():
    """`chrt -f 1` when it works here (root, or CAP_SYS_NICE), else nothing."""
    if shutil.which("chrt"):
        r = subprocess.run(["chrt", "-f", "1", "true"], capture_output=True)
        if r.returncode == 0:
            return ["chrt", "-f", "1"], "SCHED_FIFO (`chrt -f 1`)"
    return [], "the normal scheduling class (`chrt -f` failed: the attacker may delay its sends)"


def main():
    ap = argparse.ArgumentParser(description="Rate limits under attack, edgecache against "
                                             "nginx.")
    ap.add_argument("--quick", action="store_true", help="1 repetition of 3 s phases")
    ap.add_argument("--seconds", type=int, help="length of each phase (default 10, 3 with "
                                                "--quick)")
    ap.add_argument("--repetitions", "--reps", dest="repetitions", type=int,
                    help="repetitions (default 3, 1 with --quick)")
    ap.add_argument("--cpus", help="SERVER:CLIENT CPU lists (default: the first two CPUs "
                                   "this process may use, 0:1)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results"))
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    ap.add_argument("--nice", type=int,
                    help="nice value of the servers and load generators (default -10 as "
                         "root, so that other work on a shared machine takes less of their "
                         "CPUs; 0 otherwise)")
    ap.add_argument("--edgecache-limits", choices=("auto", "on", "off"), default="auto",
                    help="give edgecache the limit (on), not (off), or whatever its build "
                         "accepts (auto)")
    ap.add_argument("--hold", help="edgecache's limit_req `hold` (e.g. 1s): a refusal is "
                                   "answered when the attacker's next request could pass; "
                                   "nginx has no such setting")
    a = ap.parse_args()
    if a.hold:
        global EDGECACHE_HOLD
        EDGECACHE_HOLD = f', hold = "{a.hold}"'
    a.argv = (["--quick"] if a.quick else []) + [
        f"--{k} {v}" for k, v in (("seconds", a.seconds), ("repetitions", a.repetitions),
                                  ("cpus", a.cpus)) if v is not None]
    if a.edgecache_limits != "auto":
        a.argv.append(f"--edgecache-limits {a.edgecache_limits}")
    if a.hold:
        a.argv.append(f"--hold {a.hold}")
    if a.nice is not None:
        a.argv.append(f"--nice {a.nice}")
    else:
        a.nice = -10 if os.geteuid() == 0 else 0
    if not -20 <= a.nice <= 19:
        ap.error("--nice must be -20..19")
    if a.seconds is None:
        a.seconds = 3 if a.quick else 10
    if a.repetitions is None:
        a.repetitions = 1 if a.quick else 3
    if not 1 <= a.seconds <= 600 or not 1 <= a.repetitions <= 100:
        ap.error("--seconds must be 1..600 and --repetitions 1..100")
    a.server_cpus, a.client_cpus = benchlib.server_client_cpus(ap, a.cpus, "limits.py")
    a.cpus_text = (",".join(map(str, a.server_cpus)), ",".join(map(str, a.client_cpus)))
    for tool in ("nginx", "taskset"):
        need(tool)
    for b, path in (("edgecache", EDGECACHE_BIN), ("edgeorigin", os.path.join(BIN, "edgeorigin")),
                    ("edgeload", os.path.join(BIN, "edgeload"))):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"limits.py: {path} missing; cargo build --release -p {b}")
    prio, a.prio_text = legit_priority()

    # SIGTERM (and SIGHUP) unwind like Ctrl-C, so the finally below stops everything.
    def unwind(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, unwind)
    signal.signal(signal.SIGHUP, unwind)

    work = tempfile.mkdtemp(prefix="limits-")
    os.chmod(work, 0o755)
    started = time.time()
    if a.edgecache_limits == "auto":
        limits, note = edgecache_knows_limits(work)
        note = note and f"`edgecache -t`: {note}"
    else:
        limits, note = a.edgecache_limits == "on", ("--edgecache-limits off"
                                                    if a.edgecache_limits == "off" else "")
    print(f"limits.py: edgecache {'with' if limits else 'WITHOUT'} limit_req"
          + (f" ({note})" if note else ""), file=sys.stderr)
    nice = ["nice", "-n", str(a.nice)] if a.nice else []
    plan = Plan(a, work, prio, nice)
    origin = None
    servers = []
    rows = []
    problems = []
    warnings = []
    logs = {}
    info = {}
    ok = False
    try:
        info = versions()
        oport = free_port()
        with open(os.path.join(work, "origin.log"), "w") as olog:
            origin = subprocess.Popen(
                [os.path.join(BIN, "edgeorigin"), "--listen", f"127.0.0.1:{oport}",
                 "--sizes", "1k", "--count", str(IDS), "--max-age", "3600"],
                stdout=subprocess.DEVNULL, stderr=olog, start_new_session=True)
        wait_port(oport, timeout=20)
        for kind in SERVERS:
            s = Server(kind, work, oport, a.server_cpus,
                       limits if kind == "edgecache" else True, nice)
            servers.append(s)
            s.start()
        for s in servers:
            problems += [f"{s.kind}: {p}" for p in warm(s, work)]
        for rep in range(1, a.repetitions + 1):
            order = servers if rep % 2 else servers[::-1]
            for s in order:
                for phase in PHASES:
                    if not s.alive():
                        problems.append(f"{phase} rep {rep} {s.kind}: not run, the server "
                                        "had exited")
                        continue
                    # The attacker's bucket refills between phases (burst / rate = 0.2 s).
                    time.sleep(0.5)
                    row = measure(plan, phase, s, rep, oport)
                    rows.append(row)
                    print(json.dumps({k: row.get(k) for k in
                                      ("phase", "server", "rep", "cpu_s", "problems")}),
                          file=sys.stderr, flush=True)
        ok = True
    finally:
        for s in servers:
            s.stop()
            logs[s.kind] = s.log_lines()
        stop_group(origin)
        if not ok:
            print(f"limits.py: stopped early; the run directory is kept: {work}",
                  file=sys.stderr)
    for r in rows:
        problems += [f"{r['phase']} rep {r['rep']} {r['server']}: {p}" for p in r["problems"]]
        warnings += [f"{r['phase']} rep {r['rep']} {r['server']}: {w}" for w in r["warnings"]]
    warnings += shared_cpu_warning(rows, a)
    md = write_report(a, rows, problems, warnings, logs, info, started, limits, note)
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
        print("limits.py: interrupted; every process it started is stopped", file=sys.stderr)
        sys.exit(130)
