#!/usr/bin/env python3
"""Cache hits over TLS: edgecache against nginx (ssl, http2) in the same run, HTTP/2 with
h2load and HTTP/1.1 with edgeload, and handshake-heavy load (a new connection per
request), full handshakes against resumed ones.

Usage: edgebench tls [--quick] [--duration 5s] [--repetitions 3] [--out docs/results]
                     [--keep], which runs
       python3 bench/tls.py [--quick] [--seconds 5] [--repetitions 3] [--out docs/results]
                            [--keep] [--cells h2-1k,h2-100k,h1-1k,h1-100k,handshake-full,
                                              handshake-resumed]

Needs target/release/{edgecache,edgeorigin,edgeload} (`cargo build --release -p edgecache
-p edgeorigin -p edgeload`), nginx with the ssl and http2 modules, h2load (Debian's
nghttp2-client), openssl, curl and taskset. `--quick`: one repetition of 2 s cells (an explicit
--seconds or --repetitions still wins).

One ECDSA P-256 certificate for both servers, made with the openssl CLI in the run
directory: a CA, and a leaf for `bench.example` and 127.0.0.1 signed by it (CA:FALSE).
edgeorigin serves `--sizes 1k,100k --count 100 --max-age 3600` on no particular CPU.
Each server has one worker pinned to CPU 0 (edgecache `workers = 1`, `worker_cpu_affinity
= [0]`; nginx `worker_processes 1; worker_cpu_affinity 01;`), one TLS listener with HTTP/2
(ALPN h2, http/1.1), TLS 1.2 and 1.3 with session resumption (tickets and a session
cache), access logs off, a disk cache in the run directory, a keep-alive upstream to the
origin, `keepalive_requests 1000000`. Both servers choose the cipher by their own order,
AES-128-GCM first (edgecache's rustls config does; nginx gets `ssl_prefer_server_ciphers
on` and the same TLS 1.3 order through `ssl_conf_command Ciphersuites`), so they encrypt
with the same cipher. Every object (100 ids per size) is fetched once through each
server, and one object per size must then answer `X-Cache-Status: HIT` over HTTP/2 with
the chain checked against the CA (curl --cacert). The load generator is pinned to CPU 1.

Cells, each run --repetitions times, the servers alternating within a repetition:

- h2-1k, h2-100k: `h2load -t1 -c16 -m10` (1 KiB) or `-m4` (100 KiB) for --seconds over the
  100 URLs of the size. -m4 for 100 KiB: with -m1 each connection would carry one
  stream at a time and wait a round trip between responses (HTTP/1.1's pattern); with 4
  streams per connection, 64 responses (6.4 MB) are in flight, the server interleaves
  DATA frames of several streams per connection, which is HTTP/2's own work, and -m10
  would only queue more bytes in the socket buffers (h2load's windows are 2^30, so flow
  control never stalls either way).
- h1-1k, h1-100k: `edgeload -t1 -c16 --insecure --paths 100` over https://, HTTP/1.1
  keep-alive connections.
- handshake-full, handshake-resumed: `edgeload -t1 -c16 --insecure --no-keepalive
  --paths 100` on 1 KiB objects, so every request opens a TCP connection and makes a TLS
  handshake (`Connection: close`), with `--tls-no-resume` (every handshake full) or
  without (resumed: a TLS 1.3 PSK with ECDHE, no certificate, no signature; the first
  connections, and a few that find the client's ticket cache momentarily empty, make
  full ones: the table gives the resumed share). edgecache's own split, the increase of
  `edgecache_tls_handshakes_total{kind="full"|"resumed"}` on /metrics, is checked
  against the client's.

For every cell: req/s, the server's CPU time (utime+stime, plus that of children it
reaped, over every process of its process group, from /proc/<pid>/stat) before and after
the client run, hence µs of server CPU per request and requests per server CPU-second;
the ratio edgecache / nginx of the latter is taken per repetition (the two runs next to
each other), and every figure is reported as the median (min-max) over repetitions. The
origin's request count is read around each cell: a hit-only cell fetches nothing.
Writes `tls.md` to --out.
"""

import argparse
import gzip
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import benchlib
from benchlib import (ROOT, BIN, free_port, wait_port, group_cpu_s as cpu_s, cpu_busy,
                      stop_group, origin_requests, med, log_lines)

CELLS = ["h2-1k", "h2-100k", "h1-1k", "h1-100k", "handshake-full", "handshake-resumed"]
SERVERS = ["edgecache", "nginx"]
IDS = 100
CONNS = 16
SERVER_CPU = 0
CLIENT_CPU = 1
# Both servers: far above the 16 connections of a cell, and 2 x 8192 + slack fits under
# a descriptor limit of 20000 (edgecache warns at start when it does not).
WORKER_CONNECTIONS = 8192
# A cell where more than this share of CPU 0 went to something other than the server
# (busy - the server's CPU time) is flagged: something else ran on the server's CPU.
SHARED_CPU = 0.2


def need(tool):
    return benchlib.need(tool, "tls.py")


def client_cpu():
    """CPU seconds of the children this script has reaped (the load generators)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_client(cmd, log, timeout):
    """Runs a load generator in its own process group (killed on timeout, error or
    Ctrl-C); returns (exit code, stdout+stderr)."""
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            stop_group(p, grace=1)
            rc = f"killed after {timeout} s"
        except BaseException:
            stop_group(p, grace=1)
            raise
    with open(log) as f:
        return rc, f.read()


def make_certs(d):
    """A CA and a leaf for bench.example and 127.0.0.1, both ECDSA P-256."""
    os.makedirs(d)

    def ssl(*args):
        r = subprocess.run(["openssl", *args], cwd=d, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"tls.py: openssl {' '.join(args)} failed:\n{r.stderr}")

    key = ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    ssl(*key, "-out", "ca.key")
    ssl("req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "7",
        "-subj", "/CN=edgebench TLS CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "ca.pem")
    ssl(*key, "-out", "leaf.key")
    ssl("req", "-new", "-key", "leaf.key", "-subj", "/CN=bench.example", "-out", "leaf.csr")
    with open(os.path.join(d, "leaf.ext"), "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectAltName=DNS:bench.example,IP:127.0.0.1\n"
                "subjectKeyIdentifier=hash\n"
                "authorityKeyIdentifier=keyid\n")
    ssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-set_serial", "2", "-days", "7", "-sha256", "-extfile", "leaf.ext", "-out", "leaf.pem")
    ssl("verify", "-CAfile", "ca.pem", "leaf.pem")
    # nginx's workers (nobody) need not read them: the master loads them as root.
    return {k: os.path.join(d, f) for k, f in (("ca", "ca.pem"), ("cert", "leaf.pem"),
                                                ("key", "leaf.key"))}


EDGECACHE = """workers = 1
worker_cpu_affinity = [{cpu}]
access_log = "off"
keepalive_requests = 1000000
worker_connections = {wconns}
error_log = {{ path = "{dir}/error.log", level = "warn" }}
pid = "{dir}/edgecache.pid"

[[listen]]
addr = "127.0.0.1:{port}"
tls = {{ cert = "{cert}", key = "{key}", ktls = {ktls} }}
http2 = true
{listen_extra}
[[cache]]
name = "c"
path = "{dir}/cache"
levels = "1:2"
max_size = "4g"
inactive = "1h"
keys_zone = "64m"

# No RAM tier (on by default): the report's hits are disk hits, like the peers'.
[memory_cache]
size = "off"

[[upstream]]
name = "o"
servers = ["127.0.0.1:{origin}"]
keepalive = 16

[[location]]
prefix = "/"
proxy = "o"
cache = ["c"]
cache_valid = {{ "200" = "1h" }}

[admin]
listen = "127.0.0.1:{admin}"
"""

# http2_max_requests is obsolete since nginx 1.19.7 (1.22 warns and reads
# keepalive_requests instead), hence keepalive_requests alone.
NGINX = """daemon off;
master_process on;
worker_processes 1;
worker_cpu_affinity {mask};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
    worker_connections {wconns};
}}

http {{
""" + benchlib.NGINX_HTTP_COMMON + """
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    ssl_session_tickets on;
    # The server's cipher order, AES-128-GCM first, as edgecache's rustls config.
    ssl_prefer_server_ciphers on;
    ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305;
    ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256;
{nginx_ktls}
    proxy_cache_path {dir}/cache levels=1:2 keys_zone=bench:64m max_size=4g inactive=1h use_temp_path=off;

    upstream origin {{
        server 127.0.0.1:{origin};
        keepalive 16;
    }}

    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {key};

        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache bench;
            proxy_cache_valid 200 1h;
            add_header X-Cache-Status $upstream_cache_status;
        }}
    }}
}}
"""


class Server:
    def __init__(self, kind, work, origin, certs, ktls):
        self.kind = kind
        self.dir = os.path.join(work, kind)
        os.makedirs(self.dir)
        # nginx's workers run as an unprivileged user: they must be able to write here.
        os.chmod(self.dir, 0o777)
        self.port = free_port()
        self.admin = free_port() if kind == "edgecache" else None
        tmpl = EDGECACHE if kind == "edgecache" else NGINX
        text = tmpl.format(dir=self.dir, port=self.port, admin=self.admin, origin=origin,
                           cert=certs["cert"], key=certs["key"], cpu=SERVER_CPU,
                           mask=format(1 << SERVER_CPU, "b"), wconns=WORKER_CONNECTIONS,
                           ktls="true" if ktls else "false", listen_extra="",
                           nginx_ktls="    ssl_conf_command Options KTLS;\n" if ktls else "")
        self.cfg = os.path.join(self.dir, "edgecache.toml" if kind == "edgecache" else "nginx.conf")
        with open(self.cfg, "w") as f:
            f.write(text)
        self.proc = None

    def start(self):
        if self.kind == "edgecache":
            cmd = [os.path.join(BIN, "edgecache"), "-c", self.cfg]
        else:
            cmd = [need("nginx"), "-c", self.cfg, "-p", self.dir]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(self.dir, "stderr.log"), "a"),
                                     start_new_session=True)
        try:
            wait_port(self.port, timeout=20)
            if self.admin:
                wait_port(self.admin, timeout=20)
        except SystemExit:
            raise SystemExit(f"tls.py: {self.kind} did not start:\n{self.log_tail()}")

    def stop(self):
        stop_group(self.proc)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def cpu(self):
        return cpu_s(self.proc.pid)

    def handshakes(self):
        """edgecache's (full, resumed) handshake counters; None for nginx."""
        if not self.admin:
            return None
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=5) as r:
            text = r.read().decode()
        got = {}
        for kind in ("full", "resumed"):
            m = re.search(r'^edgecache_tls_handshakes_total\{kind="%s"\} (\d+)' % kind, text, re.M)
            got[kind] = int(m.group(1)) if m else 0
        return got["full"], got["resumed"]

    def log_lines(self):
        return log_lines(self.dir)

    def log_tail(self, n=20):
        return "\n".join(self.log_lines()[-n:])


def url(server, path):
    return f"https://127.0.0.1:{server.port}{path}"


def edgeload_json(js):
    with open(js) as f:
        r = json.load(f)
    errors = sum(v for v in r["errors"].values() if isinstance(v, (int, float)))
    bad_status = sum(n for s, n in r.get("status", {}).items() if not s.startswith("2"))
    return r, errors, bad_status


def warm(server, work, certs):
    """Every object of both sizes once through the server, then one HIT per size over
    HTTP/2 with the chain verified."""
    problems = []
    for size in ("1k", "100k"):
        js = os.path.join(work, f"warm-{server.kind}-{size}.json")
        rc, out = run_client(
            [os.path.join(BIN, "edgeload"), "-t", "1", "-c", "4", "-d", "60s", "-T", "10s",
             "--insecure", "--paths", str(IDS), "--sequential", "--requests", str(IDS),
             "--json", js, url(server, f"/obj/{size}")],
            js + ".log", timeout=90)
        if rc != 0:
            problems.append(f"{server.kind}: warm-up of {size} failed (exit {rc}): {out[-300:]}")
            continue
        r, errors, bad = edgeload_json(js)
        if errors or bad or r["requests"] != IDS:
            problems.append(f"{server.kind}: warm-up of {size}: {r['requests']} requests, "
                            f"{errors} errors, {bad} bad statuses")
        cp = subprocess.run(
            ["curl", "-sS", "--http2", "--cacert", certs["ca"], "-o", "/dev/null", "-D", "-",
             "-w", "proto=%{http_version}\n", url(server, f"/obj/{size}/1")],
            capture_output=True, text=True, timeout=20)
        head = cp.stdout
        st = re.search(r"^x-cache-status:\s*(\S+)", head, re.I | re.M)
        proto = re.search(r"^proto=(\S+)", head, re.M)
        status = st.group(1) if st else "no header"
        proto = proto.group(1) if proto else "?"
        if cp.returncode != 0 or status != "HIT" or proto != "2":
            problems.append(f"{server.kind}: /obj/{size}/1 over curl --http2 --cacert: "
                            f"X-Cache-Status {status}, HTTP version {proto}, curl exit "
                            f"{cp.returncode} {cp.stderr.strip()}")
    return problems


H2_FINISHED = re.compile(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s")
H2_REQS = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                     r"(\d+) failed, (\d+) errored, (\d+) timeout")
H2_STATUS = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")


def client_cmd(cell, server, secs, js):
    size = "100k" if cell.endswith("100k") else "1k"
    pin = ["taskset", "-c", str(CLIENT_CPU)]
    if cell.startswith("h2-"):
        m = "4" if size == "100k" else "10"
        return pin + ["h2load", "-t1", f"-c{CONNS}", f"-m{m}", "-D", str(secs)] + [
            url(server, f"/obj/{size}/{i}") for i in range(1, IDS + 1)]
    cmd = pin + [os.path.join(BIN, "edgeload"), "-t", "1", "-c", str(CONNS), "-d", f"{secs}s",
                 "--insecure", "--paths", str(IDS), "--json", js]
    if cell.startswith("handshake"):
        cmd.append("--no-keepalive")
        if cell == "handshake-full":
            cmd.append("--tls-no-resume")
    return cmd + [url(server, f"/obj/{size}")]


def ktls_conns():
    """Connections the kernel has taken TLS transmit keys for since boot (TlsTxSw of
    /proc/net/tls_stat; 0 without the tls module)."""
    try:
        with open("/proc/net/tls_stat") as f:
            for line in f:
                if line.startswith("TlsTxSw"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(cell, server, secs, rep, work, oport):
    js = os.path.join(work, f"{cell}-{server.kind}-{rep}.json")
    cmd = client_cmd(cell, server, secs, js)
    o0 = origin_requests(oport)
    h0 = server.handshakes()
    t0s = ktls_conns()
    b0, k0 = cpu_busy(), client_cpu()
    c0 = server.cpu()
    t0 = time.time()
    rc, out = run_client(cmd, js + ".log", timeout=secs + 60)
    wall = time.time() - t0
    c1 = server.cpu()
    b1, k1 = cpu_busy(), client_cpu()
    h1 = server.handshakes() if server.alive() else None
    t1s = ktls_conns()
    o1 = origin_requests(oport)
    row = {"cell": cell, "server": server.kind, "rep": rep, "cpu_s": round(c1 - c0, 3),
           "wall_s": round(wall, 3), "client_cpu_s": round(k1 - k0, 3),
           "cpu_busy_s": {str(c): round(b1[c][0] - b0[c][0], 3) for c in sorted(b1) if c in b0},
           "softirq_s": {str(c): round(b1[c][1] - b0[c][1], 3) for c in sorted(b1) if c in b0},
           "origin_fetches": o1 - o0, "problems": [], "warnings": [],
           "ktls_conns": t1s - t0s}
    if not server.alive():
        row["problems"].append(f"{server.kind} exited during the cell: {server.log_tail(5)}")
    if rc != 0:
        row["problems"].append(f"client exited ({rc}): {out.strip()[-400:]}")
    if cell.startswith("h2-"):
        fin, reqs, stc = H2_FINISHED.search(out), H2_REQS.search(out), H2_STATUS.search(out)
        if not (fin and reqs):
            row["problems"].append(f"cannot parse h2load's output: {out.strip()[-400:]}")
            return row
        dur = float(fin.group(1)) / (1000 if fin.group(2) == "ms" else 1)
        ok, failed, errored, tmo = (int(reqs.group(i)) for i in (4, 5, 6, 7))
        row.update(duration_s=dur, rps=float(fin.group(3)), requests=ok,
                   errors=failed + errored + tmo)
        if stc:
            row["non_2xx"] = sum(int(stc.group(i)) for i in (2, 3, 4))
        for key, pat in (("protocol", r"Application protocol: (\S+)"),
                         ("tls", r"TLS Protocol: (\S+)"), ("cipher", r"Cipher: (\S+)"),
                         ("kx", r"Server Temp Key: (.+)")):
            m = re.search(pat, out)
            if m:
                row[key] = m.group(1).strip()
        if row.get("protocol") != "h2":
            row["problems"].append(f"h2load negotiated {row.get('protocol')!r}, not h2")
    else:
        if not os.path.exists(js):
            row["problems"].append(f"no JSON from edgeload: {out.strip()[-400:]}")
            return row
        r, errors, bad = edgeload_json(js)
        row.update(duration_s=r["duration_s"], rps=r["rps"], requests=r["requests"],
                   errors=errors, non_2xx=bad, handshakes=r.get("tls_handshakes", 0),
                   resumed=r.get("tls_resumed", 0), tls_failed=r.get("tls_failed", 0),
                   error_kinds={k: v for k, v in r["errors"].items() if v})
        if row["tls_failed"]:
            row["problems"].append(f"{row['tls_failed']} TLS handshakes failed")
    if row.get("errors") or row.get("non_2xx"):
        row["problems"].append(f"{row.get('errors', 0)} failed requests, "
                               f"{row.get('non_2xx', 0)} non-2xx")
    if row["origin_fetches"]:
        row["problems"].append(f"{row['origin_fetches']} origin fetches (not all hits)")
    busy0 = cpu_frac(row, SERVER_CPU)
    if busy0 is not None:
        other = busy0 - row["cpu_s"] / wall
        if other > SHARED_CPU:
            soft = row["softirq_s"].get(str(SERVER_CPU), 0) / wall
            row["warnings"].append(
                f"CPU 0 was {busy0:.0%} busy, the server's own time {row['cpu_s'] / wall:.0%}: "
                f"{other:.0%} went to other processes (or to softirq work outside the "
                f"server's time; CPU 0's softirq in all: {soft:.0%})")
    if h0 is not None and h1 is not None:
        row["srv_full"], row["srv_resumed"] = h1[0] - h0[0], h1[1] - h0[1]
        if cell.startswith("handshake"):
            client_full = row["handshakes"] - row["resumed"]
            # A handshake may complete on one side only as the run stops: allow a few.
            slack = CONNS + row["handshakes"] // 100
            if (abs(row["srv_full"] - client_full) > slack
                    or abs(row["srv_resumed"] - row["resumed"]) > slack):
                row["problems"].append(
                    f"edgecache counted {row['srv_full']} full + {row['srv_resumed']} resumed "
                    f"handshakes, the client {client_full} full + {row['resumed']} resumed")
    return row


def per_cpu(r, key="requests"):
    if r.get(key) is None or not r.get("cpu_s"):
        return None
    return r[key] / r["cpu_s"]


def versions():
    out = benchlib.first_line
    model = benchlib.cpu_model()
    try:
        with open("/proc/sys/net/ipv4/tcp_available_ulp") as f:
            ulp = f.read().strip()
    except OSError:
        ulp = "(unreadable)"
    # Whether softirq time is charged to the interrupted task (tick-based accounting) or
    # kept apart (CONFIG_IRQ_TIME_ACCOUNTING).
    irq_acct = "unknown (no /proc/config.gz)"
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            conf = f.read()
        irq_acct = "on" if "CONFIG_IRQ_TIME_ACCOUNTING=y" in conf else "off"
    except OSError:
        pass
    # The TLS libraries: nginx's OpenSSL as it reports it, edgecache's rustls from the
    # lock file it was built from.
    try:
        p = subprocess.run([need("nginx"), "-V"], capture_output=True, text=True, timeout=10)
        m = (re.search(r"running with (OpenSSL [^ )]+)", p.stderr)
             or re.search(r"built with (OpenSSL [^ )]+)", p.stderr))
        nginx_ssl = m.group(1) if m else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        nginx_ssl = "unknown"
    rustls = "unknown"
    try:
        with open(os.path.join(ROOT, "Cargo.lock")) as f:
            m = re.search(r'name = "rustls"\nversion = "([^"]+)"', f.read())
        rustls = f"rustls {m.group(1)}" if m else rustls
    except OSError:
        pass
    return {
        "nginx_ssl": nginx_ssl,
        "rustls": rustls,
        "edgecache": out([os.path.join(BIN, "edgecache"), "--version"]),
        "nginx": out([need("nginx"), "-v"]),
        "h2load": out(["h2load", "--version"]),
        "openssl": out(["openssl", "version"]),
        "kernel": os.uname().release,
        "cpu": f"{model}, {os.cpu_count()} CPUs",
        "ulp": ulp,
        "irq_acct": irq_acct,
    }


def main():
    ap = argparse.ArgumentParser(description="Cache hits over TLS, edgecache against nginx.")
    ap.add_argument("--quick", action="store_true", help="1 repetition of 2 s cells")
    ap.add_argument("--seconds", type=int,
                    help="length of each cell (default 5, 2 with --quick)")
    ap.add_argument("--repetitions", type=int,
                    help="runs of each cell per server (default 3, 1 with --quick)")
    ap.add_argument("--cells", default=",".join(CELLS),
                    help="comma separated, of: " + ",".join(CELLS))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results"))
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    ap.add_argument("--ktls", choices=("off", "on"), default="off",
                    help="kernel TLS for both servers (edgecache tls.ktls, nginx "
                         "ssl_conf_command Options KTLS); the report counts the connections "
                         "the kernel carried (/proc/net/tls_stat)")
    a = ap.parse_args()
    # The command as given, for the report (before the --quick defaults fill in).
    a.argv = (["--quick"] if a.quick else []) + [
        f"--{k} {v}" for k, v in (("seconds", a.seconds), ("repetitions", a.repetitions))
        if v is not None]
    if a.ktls == "on":
        a.argv.append("--ktls on")
    if a.seconds is None:
        a.seconds = 2 if a.quick else 5
    if a.repetitions is None:
        a.repetitions = 1 if a.quick else 3
    cells = [c.strip() for c in a.cells.split(",") if c.strip()]
    bad = [c for c in cells if c not in CELLS]
    if bad or not cells:
        ap.error(f"--cells: unknown {','.join(bad) or '(empty)'}; known: {','.join(CELLS)}")
    if a.seconds < 1 or a.repetitions < 1:
        ap.error("--seconds and --repetitions must be at least 1")
    if os.cpu_count() < 2:
        raise SystemExit("tls.py: needs 2 CPUs (server on CPU 0, client on CPU 1)")
    for tool in ("nginx", "h2load", "openssl", "taskset", "curl"):
        need(tool)
    for b in ("edgecache", "edgeorigin", "edgeload"):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            raise SystemExit(f"tls.py: {os.path.join(BIN, b)} missing; "
                             f"cargo build --release -p {b}")

    # SIGTERM (and SIGHUP) unwind like Ctrl-C, so the finally below stops everything.
    def unwind(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, unwind)
    signal.signal(signal.SIGHUP, unwind)

    work = tempfile.mkdtemp(prefix="tls-")
    os.chmod(work, 0o755)
    started = time.time()
    origin = None
    servers = []
    rows = []
    problems = []
    warnings = []
    logs = {}
    ok = False
    try:
        info = versions()
        certs = make_certs(os.path.join(work, "certs"))
        oport = free_port()
        origin = subprocess.Popen(
            [os.path.join(BIN, "edgeorigin"), "--listen", f"127.0.0.1:{oport}",
             "--sizes", "1k,100k", "--count", str(IDS), "--max-age", "3600"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "origin.log"), "w"),
            start_new_session=True)
        wait_port(oport, timeout=20)
        for kind in SERVERS:
            s = Server(kind, work, oport, certs, a.ktls == "on")
            servers.append(s)
            s.start()
        for s in servers:
            problems += warm(s, work, certs)
        info["warm_origin_fetches"] = origin_requests(oport)
        for cell in cells:
            for rep in range(1, a.repetitions + 1):
                for s in servers:
                    if not s.alive():
                        problems.append(f"{cell} rep {rep} {s.kind}: not run, the server "
                                        "had exited")
                        continue
                    row = measure(cell, s, a.seconds, rep, work, oport)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
        ok = True
    finally:
        for s in servers:
            s.stop()
            logs[s.kind] = s.log_lines()
        stop_group(origin)
        if not ok:
            print(f"tls.py: stopped early; the run directory is kept: {work}", file=sys.stderr)
    for r in rows:
        problems += [f"{r['cell']} rep {r['rep']} {r['server']}: {p}" for p in r["problems"]]
        warnings += [f"{r['cell']} rep {r['rep']} {r['server']}: {w}" for w in r["warnings"]]
    write_report(a, cells, rows, problems, warnings, logs, info, started)
    if a.keep:
        print(f"run directory kept: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(a.out, "tls.md")) as f:
        print(f.read())


HOW_TO_READ = """
Compare the **req per CPU-s ratio**: how many requests edgecache serves with the CPU time
nginx needs for one of its own, in the same run, with the same certificate, cipher and
objects (above 1: edgecache needs less CPU per request). The servers' worker is pinned to
CPU 0 and the load generator to CPU 1. When the server used well under 1.00 cores and CPU
0 was not busy either, the client (h2load or edgeload on one core, which pays for TLS too)
was the limit: that req/s says little about the server, while its CPU per request still
does. When CPU 0 was much busier than the server (the CPU 0 / CPU 1 column; such cells
are listed under Warnings), something else shared the server's core: req/s is then low
for reasons outside the server, and CPU per request may read high (caches shared, fewer
requests per wake-up). Server CPU counts every thread and process of the server
(edgecache's admin thread; nginx's master and cache manager) and the kernel's work on
their behalf: their system calls and, where IRQ time accounting is off (see Machine
above), the network stack's softirq work that ran while they were on the CPU; softirq
work done by ksoftirqd, on an idle CPU, or anywhere with IRQ time accounting on, is
nobody's (it shows in how busy CPU 0 was; the raw data has each CPU's softirq time as
`softirq_s`). In the
handshake cells every request opens a TCP connection
and makes a TLS handshake, so their CPU per request is accept + handshake + one 1 KiB hit
+ close; the difference between the full and the resumed cell is the price of the
certificate (its ECDSA P-256 signature), as a TLS 1.3 resumption still makes an ECDHE
exchange. Ratios from one run compare; absolute figures move with the machine and with
anything else running on it.
"""

TITLES = {
    "h2-1k": "HTTP/2, 1 KiB hits (h2load -t1 -c16 -m10)",
    "h2-100k": "HTTP/2, 100 KiB hits (h2load -t1 -c16 -m4)",
    "h1-1k": "HTTP/1.1 over TLS, 1 KiB hits (edgeload -t1 -c16, keep-alive)",
    "h1-100k": "HTTP/1.1 over TLS, 100 KiB hits (edgeload -t1 -c16, keep-alive)",
    "handshake-full": "Handshakes, full (edgeload -c16 --no-keepalive --tls-no-resume, 1 KiB)",
    "handshake-resumed": "Handshakes, resumed (edgeload -c16 --no-keepalive, 1 KiB)",
}


def ratios(rows, cell, key="requests"):
    """edgecache / nginx of requests per CPU-second, per repetition."""
    out = []
    by = {(r["server"], r["rep"]): r for r in rows if r["cell"] == cell}
    for (srv, rep), e in by.items():
        g = by.get(("nginx", rep))
        if srv == "edgecache" and g and per_cpu(e, key) and per_cpu(g, key):
            out.append(per_cpu(e, key) / per_cpu(g, key))
    return out


def write_report(a, cells, rows, problems, warnings, logs, info, started):
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "tls.md")
    cmd = " ".join(["python3 bench/tls.py"] + a.argv)
    if cells != CELLS:
        cmd += f" --cells {','.join(cells)}"
    with open(path, "w") as f:
        f.write("# Cache hits over TLS: edgecache against nginx, HTTP/2 and HTTP/1.1, "
                "handshakes\n\n")
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
        f.write(f"Produced by `edgebench tls`, which ran `{cmd}` on {when}: "
                f"{a.repetitions} repetition(s) of {a.seconds} s cells.\n\n")
        f.write("- Machine: " + info["cpu"] + f", Linux {info['kernel']} (IRQ time "
                f"accounting {info['irq_acct']}); every process on loopback; the servers' "
                "worker on CPU 0, the load generator on CPU 1, the origin unpinned.\n")
        f.write(f"- Versions: {info['edgecache']} ({info['rustls']}, ring); "
                f"{info['nginx'].replace('nginx version: ', '')} ({info['nginx_ssl']}); "
                f"{info['h2load']}; openssl CLI {info['openssl']}.\n")
        ulp = info["ulp"]
        carried = {srv: sum(r.get("ktls_conns", 0) for r in rows if r["server"] == srv)
                   for srv in SERVERS}
        if a.ktls == "on":
            f.write(f"- kTLS: `--ktls on` (edgecache `tls.ktls = true`, nginx `ssl_conf_command "
                    f"Options KTLS`); `tcp_available_ulp`: `{ulp or '(empty)'}`; connections "
                    "the kernel carried during the cells (TlsTxSw of /proc/net/tls_stat): "
                    + ", ".join(f"{srv} {n:,}" for srv, n in carried.items()) + ".\n")
        elif "tls" in ulp.split():
            f.write(f"- kTLS: the kernel offers the `tls` ULP (`tcp_available_ulp`: `{ulp}`); "
                    "neither server was configured to use it (`--ktls off`).\n")
        else:
            f.write(f"- kTLS: not available on this kernel (`/proc/sys/net/ipv4/"
                    f"tcp_available_ulp`: `{ulp or '(empty)'}`), so nginx's `sendfile on` "
                    "does not apply to TLS connections: both servers encrypt in user space "
                    "and write the ciphertext.\n")
        neg = sorted({(r.get("tls"), r.get("cipher"), r.get("kx"), r["server"])
                      for r in rows if r.get("cipher")})
        if neg:
            f.write("- Negotiated (h2load's view): " + "; ".join(
                f"{srv}: {t}, {c}, {k}" for t, c, k, srv in neg) + ".\n")
        f.write(f"- Warm-up: {info.get('warm_origin_fetches', '?')} origin fetches for "
                f"{2 * IDS} objects x {len(SERVERS)} servers.\n\n")
        f.write(__doc__.split("\n\n", 3)[3].split("\n\nFor every cell")[0] + "\n\n")

        f.write("## Summary\n\nThe goal metric: requests per second of server CPU, edgecache "
                "/ nginx (above 1: edgecache does more with the same CPU).\n\n")
        f.write("| cell | edgecache req/s | nginx req/s | edgecache µs CPU/req | "
                "nginx µs CPU/req | **edgecache / nginx, req per CPU-s** |\n"
                "|---|---|---|---|---|---|\n")
        for cell in cells:
            cr = [r for r in rows if r["cell"] == cell]
            e = [r for r in cr if r["server"] == "edgecache"]
            g = [r for r in cr if r["server"] == "nginx"]
            f.write(f"| {cell} | {med([r.get('rps') for r in e], '{:,.0f}')} | "
                    f"{med([r.get('rps') for r in g], '{:,.0f}')} | "
                    f"{med([cpu_us(r) for r in e], '{:,.1f}')} | "
                    f"{med([cpu_us(r) for r in g], '{:,.1f}')} | "
                    f"**{med(ratios(rows, cell), '{:.2f}')}** |\n")
        f.write("\nEvery figure: median (min–max) over repetitions; the ratio is taken per "
                "repetition, each edgecache run against the nginx run next to it.\n\n")

        f.write("## Cells\n\n")
        for cell in cells:
            cr = [r for r in rows if r["cell"] == cell]
            if not cr:
                continue
            f.write(f"### {cell}: {TITLES[cell]}\n\n")
            hs = cell.startswith("handshake")
            f.write("| server | req/s | server CPU, cores | client CPU, cores | CPU 0 / CPU 1 busy "
                    "| µs CPU/req | req per CPU-s | "
                    + ("handshakes/s | resumed (client) | µs CPU/handshake | " if hs else "")
                    + "failed | origin fetches | edgecache / nginx |\n")
            f.write("|---|---|---|---|---|---|---|" + ("---|---|---|" if hs else "")
                    + "---|---|---|\n")
            for srv in SERVERS:
                sr = [r for r in cr if r["server"] == srv]
                if not sr:
                    continue
                f.write(f"| {srv} | {med([r.get('rps') for r in sr], '{:,.0f}')} | "
                        f"{med([busy(r) for r in sr], '{:.2f}')} | "
                        f"{med([busy(r, 'client_cpu_s') for r in sr], '{:.2f}')} | "
                        f"{med([cpu_frac(r, SERVER_CPU) for r in sr], '{:.0%}')} / "
                        f"{med([cpu_frac(r, CLIENT_CPU) for r in sr], '{:.0%}')} | "
                        f"{med([cpu_us(r) for r in sr], '{:,.1f}')} | "
                        f"{med([per_cpu(r) for r in sr], '{:,.0f}')} | ")
                if hs:
                    f.write(f"{med([hs_rate(r) for r in sr], '{:,.0f}')} | "
                            f"{med([resumed_share(r) for r in sr], '{:.1%}')} | "
                            f"{med([cpu_us(r, 'handshakes') for r in sr], '{:,.1f}')} | ")
                fails = sum((r.get("errors") or 0) + (r.get("non_2xx") or 0) for r in sr)
                fails_txt = str(fails) if fails == 0 else f"**{fails}**"
                if any("requests" not in r for r in sr):
                    fails_txt += " (a run did not finish)"
                f.write(f"{fails_txt} | {sum(r['origin_fetches'] for r in sr)} | "
                        + (f"**{med(ratios(rows, cell), '{:.2f}')}**" if srv == "edgecache"
                           else "1") + " |\n")
            if hs:
                e = [r for r in cr if r["server"] == "edgecache" and "srv_full" in r]
                if e:
                    f.write("\nedgecache's own count (`edgecache_tls_handshakes_total` "
                            "on /metrics, increase over the cell), against the client's: "
                            + "; ".join(
                                f"rep {r['rep']}: full {r['srv_full']:,}, resumed "
                                f"{r['srv_resumed']:,} (client: {r['handshakes'] - r['resumed']:,} "
                                f"full, {r['resumed']:,} resumed)" for r in e) + ".\n")
            f.write("\n")

        f.write("## How to read this\n\n" + " ".join(HOW_TO_READ.split()) + "\n\n")

        f.write("## Errors\n\n")
        if problems:
            f.write("".join(f"- {p}\n" for p in problems))
        else:
            f.write("None: no failed request, no non-2xx answer, no failed handshake, no "
                    "origin fetch during a cell, every HIT check passed, edgecache's "
                    "handshake counts agree with the client's.\n")
        f.write("\n## Warnings\n\n")
        if warnings:
            f.write("".join(f"- {w}\n" for w in warnings))
        else:
            f.write(f"None: in no cell did other processes take more than {SHARED_CPU:.0%} of "
                    "CPU 0.\n")
        f.write("\n## Server logs\n\n")
        for srv in SERVERS:
            lines = logs.get(srv, [])
            if lines:
                f.write(f"{srv} ({len(lines)} lines, the last 20):\n\n```\n"
                        + "\n".join(lines[-20:]) + "\n```\n\n")
            else:
                f.write(f"{srv}: empty error log and stderr.\n\n")
        f.write("## Raw\n\n```json\n" + "\n".join(json.dumps(r) for r in rows) + "\n```\n")
    return path


def cpu_us(r, key="requests"):
    n = r.get(key)
    if not n or r.get("cpu_s") is None:
        return None
    return r["cpu_s"] * 1e6 / n


def busy(r, key="cpu_s"):
    """CPU seconds per second of the cell: cores kept busy."""
    d = r.get("wall_s")
    return r[key] / d if d and r.get(key) is not None else None


def cpu_frac(r, cpu):
    """How busy one CPU was during the cell (anything on it: server, client, kernel,
    other processes)."""
    d, b = r.get("wall_s"), r.get("cpu_busy_s", {}).get(str(cpu))
    return b / d if d and b is not None else None


def hs_rate(r):
    if r.get("handshakes") is None or not r.get("duration_s"):
        return None
    return r["handshakes"] / r["duration_s"]


def resumed_share(r):
    if not r.get("handshakes"):
        return None
    return r["resumed"] / r["handshakes"]


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("tls.py: interrupted; every process it started is stopped", file=sys.stderr)
        sys.exit(130)
