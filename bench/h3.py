#!/usr/bin/env python3
"""Cache hits over HTTP/3: edgecache against Caddy (Go, quic-go) in the same run, 1 KiB
and 100 KiB objects and full QUIC handshakes, edgecache with and without GSO, and
edgecache's own HTTP/2 on the same objects (issue 31's experiment).

Usage: edgebench h3 [--quick] [--duration 5s] [--repetitions 3] [--out docs/results]
                    [--keep], which runs
       python3 bench/h3.py [--quick] [--seconds 5] [--repetitions 3] [--out docs/results]
                           [--keep] [--cells h3-1k,h2-1k,h3-100k,h2-100k,h3-100k-nogso,
                                             h3-handshake]

Needs target/release/{edgecache,edgeorigin,edgeload} (`cargo build --release -p edgecache
-p edgeorigin -p edgeload`), Caddy 2.6 (Debian's `caddy`; the package's system service is
not used: the script runs caddy itself), h2load (Debian's nghttp2-client), openssl, curl
and taskset. `--quick`: one repetition of 2 s cells (an explicit --seconds or
--repetitions still wins).

Certificates as `edgebench tls` makes them (bench/tls.py, whose helpers this script
shares): a CA and an ECDSA P-256 leaf for `bench.example` and 127.0.0.1. edgeorigin
serves `--sizes 1k,100k --count 100 --max-age 3600` on no particular CPU. Three servers,
started once and left running, each on CPU 0 (edgecache's one worker; all of Caddy):

- edgecache: `workers = 1`, `worker_cpu_affinity = [0]`, one TLS listener with `http2 =
  true` and `quic = true` (HTTP/3 on the same port, UDP; `quic_gso` at its default,
  true), kTLS off (HTTP/2 encrypts in user space, as QUIC always does), a disk cache in
  the run directory with no RAM tier (as in `edgebench tls`), a keep-alive upstream to
  the origin, access log off.
- edgecache-nogso: the same configuration with `quic_gso = false` (every datagram its
  own `sendmsg`), its own port and cache.
- caddy: `caddy run` with a Caddyfile in the run directory (`admin off`, `auto_https
  off`, `servers { protocols h1 h2 h3 }`, `bind 127.0.0.1`, `tls cert key` with the
  same certificate, `file_server` over a root directory), `GOMAXPROCS=1`, under
  `taskset -c 0`. Its root holds the origin's objects as static files: each
  `/obj/1k/<id>` and `/obj/100k/<id>` (ids 1-100) fetched from edgeorigin and written
  under the root at the same path, so both servers send the same bytes for the same URL.

Checks before the cells: each edgecache fetches every object once from the origin
(edgeload over HTTPS/1.1), then a pass of `edgeload --h3 --cacert CA --verify
--sequential` over the 200 URLs must answer all 200 with verified bodies (X-Checksum)
while the origin's request count does not move and edgecache's `/metrics` count 200 more
HTTP/3 streams and 200 more `X-Cache-Status` HITs; one object per size must answer
`X-Cache-Status: HIT` over HTTP/2 (curl --http2 --cacert). Caddy sends no X-Checksum:
the same `edgeload --h3 --cacert` pass must answer all 200 with 200 OK and exactly
100 x size body bytes per size, and ten objects per size fetched over HTTPS/2 with curl
must be byte-identical to the origin's. The load generator is pinned to CPU 1.

Cells, each run --repetitions times; within a repetition every cell runs in turn (h3-1k,
h2-1k, h3-100k, h2-100k, h3-100k-nogso, h3-handshake: each h2 cell right after its h3
cell), and within a cell its servers one after the other (their order alternates from
one repetition to the next):

- h3-1k, h3-100k (edgecache, caddy): `edgeload --h3 -k -t1 -c16 --pipeline 10` (1 KiB) or
  `--pipeline 4` (100 KiB) `--paths 100` for --seconds: 16 QUIC connections with 10 (4)
  request streams in flight on each, the streams h2load's -m10 (-m4) would keep.
- h3-handshake (edgecache, caddy): `edgeload --h3 -k -t1 -c16 --no-keepalive
  --tls-no-resume --paths 100` on 1 KiB objects: a new QUIC connection, with a full TLS
  1.3 handshake (certificate and signature), for every request, then closed. The figure
  is full handshakes per server CPU-second (the client's count; every one must be full;
  edgecache's `edgecache_quic_handshakes_total{result="ok"}` is checked against it).
- h3-100k-nogso (edgecache, edgecache-nogso): the h3-100k load on edgecache with GSO and
  on edgecache without, next to each other: what GSO saves, as a ratio.
- h2-1k, h2-100k (edgecache): `h2load -t1 -c16 -m10` (1 KiB) or `-m4` (100 KiB) over the
  same 100 URLs (as `edgebench tls`), edgecache's own HTTP/2 over TLS, so its HTTP/3
  CPU per request can be stated as a multiple of its HTTP/2 CPU per request, taken per
  repetition (h3-1k's edgecache run against the h2-1k run that follows its cell, at
  most one Caddy run apart).

For every cell: req/s, the server's CPU time (utime+stime, plus that of children it
reaped, over every process of its process group, from /proc/<pid>/stat) before and after
the client run, hence µs of server CPU per request and requests per server CPU-second;
each ratio is taken per repetition, from runs next to each other, and every figure is
reported as the median (min-max) over repetitions. The origin's request count is read
around each cell: a hit-only cell fetches nothing. Writes `h3.md` to --out.
"""

import argparse
import gzip
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
from benchlib import (ROOT, BIN, free_port, wait_port, group_cpu_s as cpu_s, cpu_busy,
                      stop_group, origin_requests, med, log_lines)
from tls import (make_certs, run_client, client_cpu, edgeload_json, H2_FINISHED, H2_REQS,
                 H2_STATUS, per_cpu, cpu_us, busy, cpu_frac, EDGECACHE)

# Each h2 cell right after its h3 cell: the ratio h3 / h2 pairs runs close in time.
CELLS = ["h3-1k", "h2-1k", "h3-100k", "h2-100k", "h3-100k-nogso", "h3-handshake"]
SERVERS = ["edgecache", "caddy", "edgecache-nogso"]
# Who runs each cell; the first is the numerator of the cell's ratio.
CELL_SERVERS = {
    "h3-1k": ["edgecache", "caddy"],
    "h3-100k": ["edgecache", "caddy"],
    "h3-handshake": ["edgecache", "caddy"],
    "h3-100k-nogso": ["edgecache", "edgecache-nogso"],
    "h2-1k": ["edgecache"],
    "h2-100k": ["edgecache"],
}
SIZES = {"1k": 1024, "100k": 100 * 1024}
IDS = 100
CONNS = 16
SERVER_CPU = 0
CLIENT_CPU = 1
WORKER_CONNECTIONS = 8192
# As bench/tls.py: a cell where more than this share of CPU 0 went to something other
# than the server is flagged.
SHARED_CPU = 0.2
# Caddy's objects checked byte for byte against the origin's over HTTPS/2, per size.
CADDY_BODY_CHECKS = 10


def need(tool):
    return benchlib.need(tool, "h3.py")


# edgecache's config is edgebench tls's (`tls.EDGECACHE`: one worker, a disk cache, no RAM
# tier) with QUIC on its listener.
QUIC_LISTEN = "quic = true\nquic_gso = {gso}\n"

# Caddy 2.6's Caddyfile: no admin API, no ACME, its own log at WARN to stderr (access
# logs are off unless a site asks for them), HTTP/3 on the site's UDP port. `bind
# 127.0.0.1`, as edgecache listens: bound to the wildcard address, Caddy's QUIC
# handshake fails (TLS alert 80, internal error) for a client that sends no SNI (an
# https://127.0.0.1 URL), as it then looks the certificate up by the local address,
# which a wildcard UDP socket does not give; over TCP it has the connection's own.
CADDYFILE = """{{
\tadmin off
\tauto_https off
\tlog {{
\t\toutput stderr
\t\tlevel WARN
\t}}
\tservers {{
\t\tprotocols h1 h2 h3
\t}}
}}

https://127.0.0.1:{port} {{
\tbind 127.0.0.1
\ttls {cert} {key}
\troot * {root}
\tfile_server
}}
"""


class Server:
    def __init__(self, kind, work, origin, certs):
        self.kind = kind
        self.dir = os.path.join(work, kind)
        os.makedirs(self.dir)
        self.port = free_port()
        self.admin = free_port() if kind.startswith("edgecache") else None
        self.root = os.path.join(self.dir, "root") if kind == "caddy" else None
        if kind == "caddy":
            text = CADDYFILE.format(port=self.port, cert=certs["cert"], key=certs["key"],
                                    root=self.root)
            self.cfg = os.path.join(self.dir, "Caddyfile")
        else:
            text = EDGECACHE.format(dir=self.dir, port=self.port, admin=self.admin,
                                    origin=origin, cert=certs["cert"], key=certs["key"],
                                    cpu=SERVER_CPU, wconns=WORKER_CONNECTIONS, ktls="false",
                                    listen_extra=QUIC_LISTEN.format(
                                        gso="false" if kind == "edgecache-nogso" else "true"))
            self.cfg = os.path.join(self.dir, "edgecache.toml")
        with open(self.cfg, "w") as f:
            f.write(text)
        self.proc = None

    def start(self):
        env = None
        if self.kind == "caddy":
            cmd = ["taskset", "-c", str(SERVER_CPU), need("caddy"), "run", "--adapter",
                   "caddyfile", "--config", self.cfg]
            # Caddy keeps its data (certificates it would manage, locks) under these.
            env = dict(os.environ, GOMAXPROCS="1", HOME=self.dir,
                       XDG_DATA_HOME=self.dir, XDG_CONFIG_HOME=self.dir)
        else:
            cmd = [os.path.join(BIN, "edgecache"), "-c", self.cfg]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env, cwd=self.dir,
                                     stderr=open(os.path.join(self.dir, "stderr.log"), "a"),
                                     start_new_session=True)
        try:
            wait_port(self.port, timeout=20)
            if self.admin:
                wait_port(self.admin, timeout=20)
        except SystemExit:
            raise SystemExit(f"h3.py: {self.kind} did not start:\n{self.log_tail()}")

    def stop(self):
        stop_group(self.proc)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def cpu(self):
        return cpu_s(self.proc.pid)

    def metrics(self):
        """edgecache's counters this script reads, by name; None for Caddy."""
        if not self.admin:
            return None
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=5) as r:
            text = r.read().decode()

        def get(pat):
            m = re.search(r"^" + pat + r" (\d+)", text, re.M)
            return int(m.group(1)) if m else 0
        return {
            "hs_ok": get(r'edgecache_quic_handshakes_total\{result="ok"\}'),
            "hs_error": get(r'edgecache_quic_handshakes_total\{result="error"\}'),
            "retries": get(r"edgecache_quic_retries_total"),
            "refused": get(r"edgecache_quic_refused_total"),
            "h3_streams": get(r"edgecache_h3_streams_total"),
            "conn_errors": get(r"edgecache_quic_connection_errors_total"),
            "hits": get(r'edgecache_cache_requests_total\{status="hit"\}'),
            "active": get(r"edgecache_connections_active"),
        }

    def log_lines(self):
        return log_lines(self.dir)

    def log_tail(self, n=20):
        return "\n".join(self.log_lines()[-n:])


def url(server, path):
    return f"https://127.0.0.1:{server.port}{path}"


def edgeload_pass(server, work, size, tag, extra):
    """`edgeload` over the IDS objects of `size`, each once, on 4 connections: (problems,
    its JSON or None)."""
    js = os.path.join(work, f"{tag}-{server.kind}-{size}.json")
    rc, out = run_client(
        [os.path.join(BIN, "edgeload"), "-t", "1", "-c", "4", "-d", "60s", "-T", "10s",
         *extra, "--paths", str(IDS), "--sequential", "--requests", str(IDS), "--json", js,
         url(server, f"/obj/{size}")],
        js + ".log", timeout=90)
    if rc != 0 or not os.path.exists(js):
        return [f"{server.kind}: {tag} of {size} failed (exit {rc}): {out.strip()[-300:]}"], None
    r, errors, bad = edgeload_json(js)
    if errors or bad or r["requests"] != IDS:
        return [f"{server.kind}: {tag} of {size}: {r['requests']} requests, {errors} errors, "
                f"{bad} bad statuses"], r
    return [], r


def wait_h3(server, certs, work, timeout=20):
    """Until one request over HTTP/3 succeeds (the UDP socket may come up after the TCP
    one); exits the script after timeout s."""
    js = os.path.join(work, f"ready-{server.kind}.json")
    end = time.time() + timeout
    while True:
        rc, out = run_client([os.path.join(BIN, "edgeload"), "--h3", "--cacert", certs["ca"],
                              "-t", "1", "-c", "1", "-d", "5s", "-T", "2s", "--requests", "1",
                              "--json", js,
                              url(server, "/obj/1k/1")], js + ".log", timeout=30)
        if rc == 0 and os.path.exists(js):
            r, errors, bad = edgeload_json(js)
            if r["requests"] == 1 and not errors and not bad:
                return
        if time.time() > end:
            raise SystemExit(f"h3.py: {server.kind} does not answer over HTTP/3:\n"
                             f"{out.strip()[-600:]}")
        time.sleep(0.5)


def origin_body(oport, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{oport}{path}", timeout=10) as r:
        return r.read()


def fill_caddy_root(server, oport):
    """Caddy's root: every object the origin serves, at the same path."""
    for size in SIZES:
        d = os.path.join(server.root, "obj", size)
        os.makedirs(d, exist_ok=True)
        for i in range(1, IDS + 1):
            body = origin_body(oport, f"/obj/{size}/{i}")
            if len(body) != SIZES[size]:
                raise SystemExit(f"h3.py: the origin's /obj/{size}/{i} has {len(body)} bytes")
            with open(os.path.join(d, str(i)), "wb") as f:
                f.write(body)


def curl_h2(server, certs, path, body_file):
    """(curl exit, stderr, response head + `proto=`) of one HTTPS/2 GET, the chain checked
    against the CA."""
    cp = subprocess.run(
        ["curl", "-sS", "--http2", "--cacert", certs["ca"], "-o", body_file, "-D", "-",
         "-w", "proto=%{http_version}\n", url(server, path)],
        capture_output=True, text=True, timeout=20)
    return cp.returncode, cp.stderr.strip(), cp.stdout


def warm(server, work, certs, oport):
    """edgecache: every object through it once, then the HTTP/3 HIT pass and one HTTP/2
    HIT per size. Caddy: the HTTP/3 pass and its bodies against the origin's."""
    problems = []
    edge = server.kind.startswith("edgecache")
    if edge:
        for size in SIZES:
            problems += edgeload_pass(server, work, size, "fill", ["--insecure"])[0]
    wait_h3(server, certs, work)
    for size, nbytes in SIZES.items():
        o0 = origin_requests(oport)
        m0 = server.metrics()
        extra = ["--h3", "--cacert", certs["ca"]] + (["--verify"] if edge else [])
        p, r = edgeload_pass(server, work, size, "h3check", extra)
        problems += p
        o1 = origin_requests(oport)
        m1 = server.metrics()
        if r is None:
            continue
        if r.get("bytes") != IDS * nbytes:
            problems.append(f"{server.kind}: the HTTP/3 pass over {size} got {r.get('bytes')} "
                            f"body bytes, not {IDS * nbytes}")
        if edge:
            v = r.get("verify") or {}
            if v.get("ok") != IDS or v.get("mismatched") or v.get("without_checksum"):
                problems.append(f"{server.kind}: edgeload --h3 --verify over {size}: {v}")
            streams = m1["h3_streams"] - m0["h3_streams"]
            hits = m1["hits"] - m0["hits"]
            if o1 != o0 or streams != IDS or hits != IDS:
                problems.append(f"{server.kind}: the HTTP/3 pass over {size}: {o1 - o0} origin "
                                f"fetches, {streams} HTTP/3 streams and {hits} HITs counted "
                                f"(want 0, {IDS}, {IDS})")
            body = os.path.join(work, f"curl-{server.kind}-{size}")
            rc, err, head = curl_h2(server, certs, f"/obj/{size}/1", body)
            st = re.search(r"^x-cache-status:\s*(\S+)", head, re.I | re.M)
            proto = re.search(r"^proto=(\S+)", head, re.M)
            status = st.group(1) if st else "no header"
            proto = proto.group(1) if proto else "?"
            if rc != 0 or status != "HIT" or proto != "2":
                problems.append(f"{server.kind}: /obj/{size}/1 over curl --http2 --cacert: "
                                f"X-Cache-Status {status}, HTTP version {proto}, curl exit "
                                f"{rc} {err}")
        else:
            step = max(1, IDS // CADDY_BODY_CHECKS)
            for i in range(1, IDS + 1, step):
                path = f"/obj/{size}/{i}"
                body = os.path.join(work, f"curl-caddy-{size}-{i}")
                rc, err, head = curl_h2(server, certs, path, body)
                proto = re.search(r"^proto=(\S+)", head, re.M)
                proto = proto.group(1) if proto else "?"
                got = b""
                if os.path.exists(body):
                    with open(body, "rb") as fb:
                        got = fb.read()
                same = got == origin_body(oport, path)
                if rc != 0 or proto != "2" or not same:
                    problems.append(f"caddy: {path} over curl --http2 --cacert: HTTP version "
                                    f"{proto}, {len(got)} bytes, "
                                    f"{'the same as' if same else 'not those of'} the origin's, "
                                    f"curl exit {rc} {err}")
    return problems


def client_cmd(cell, server, secs, js):
    size = "100k" if "100k" in cell else "1k"
    pin = ["taskset", "-c", str(CLIENT_CPU)]
    if cell.startswith("h2-"):
        m = "4" if size == "100k" else "10"
        return pin + ["h2load", "-t1", f"-c{CONNS}", f"-m{m}", "-D", str(secs)] + [
            url(server, f"/obj/{size}/{i}") for i in range(1, IDS + 1)]
    cmd = pin + [os.path.join(BIN, "edgeload"), "--h3", "-k", "-t", "1", "-c", str(CONNS),
                 "-d", f"{secs}s", "--paths", str(IDS), "--json", js]
    if cell == "h3-handshake":
        cmd += ["--no-keepalive", "--tls-no-resume"]
    else:
        cmd += ["--pipeline", "4" if size == "100k" else "10"]
    return cmd + [url(server, f"/obj/{size}")]


def measure(cell, server, secs, rep, work, oport):
    js = os.path.join(work, f"{cell}-{server.kind}-{rep}.json")
    cmd = client_cmd(cell, server, secs, js)
    o0 = origin_requests(oport)
    m0 = server.metrics()
    b0, k0 = cpu_busy(), client_cpu()
    c0 = server.cpu()
    t0 = time.time()
    rc, out = run_client(cmd, js + ".log", timeout=secs + 60)
    wall = time.time() - t0
    c1 = server.cpu()
    b1, k1 = cpu_busy(), client_cpu()
    m1 = server.metrics() if server.alive() else None
    o1 = origin_requests(oport)
    row = {"cell": cell, "server": server.kind, "rep": rep, "start": round(t0, 1),
           "cpu_s": round(c1 - c0, 3),
           "wall_s": round(wall, 3), "client_cpu_s": round(k1 - k0, 3),
           "cpu_busy_s": {str(c): round(b1[c][0] - b0[c][0], 3) for c in sorted(b1) if c in b0},
           "softirq_s": {str(c): round(b1[c][1] - b0[c][1], 3) for c in sorted(b1) if c in b0},
           "origin_fetches": o1 - o0, "problems": [], "warnings": []}
    if m0 is not None and m1 is not None:
        row["metrics"] = {k: m1[k] - m0[k] for k in m0 if k != "active"}
        # A gauge: the connections still open once the client has exited.
        row["metrics"]["active_after"] = m1["active"]
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
        m = re.search(r"Application protocol: (\S+)", out)
        if not m or m.group(1) != "h2":
            row["problems"].append(f"h2load negotiated {m and m.group(1)!r}, not h2")
    else:
        if not os.path.exists(js):
            row["problems"].append(f"no JSON from edgeload: {out.strip()[-400:]}")
            return row
        r, errors, bad = edgeload_json(js)
        row.update(duration_s=r["duration_s"], rps=r["rps"], requests=r["requests"],
                   errors=errors, non_2xx=bad, bytes=r.get("bytes", 0),
                   connections=r.get("connections_opened", 0),
                   handshakes=r.get("tls_handshakes", 0), resumed=r.get("tls_resumed", 0),
                   tls_failed=r.get("tls_failed", 0),
                   error_kinds={k: v for k, v in r["errors"].items() if v},
                   p50_us=r.get("latency_us", {}).get("p50"),
                   p99_us=r.get("latency_us", {}).get("p99"))
        if row["tls_failed"]:
            row["problems"].append(f"{row['tls_failed']} QUIC/TLS handshakes failed")
        size = SIZES["100k" if "100k" in cell else "1k"]
        # Bodies still arriving when the run stops count their bytes, not a request.
        if row["requests"] and not (0.99 <= row["bytes"] / (row["requests"] * size) <= 1.05):
            row["problems"].append(f"{row['bytes']:,} body bytes for {row['requests']:,} "
                                   f"requests of {size:,} bytes")
        if cell == "h3-handshake" and row["resumed"]:
            row["problems"].append(f"{row['resumed']} of {row['handshakes']} handshakes were "
                                   "resumed (--tls-no-resume: all should be full)")
    if row.get("errors") or row.get("non_2xx"):
        row["problems"].append(f"{row.get('errors', 0)} failed requests "
                               f"({row.get('error_kinds', '')}), {row.get('non_2xx', 0)} non-2xx")
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
    mt = row.get("metrics")
    if mt and row.get("requests") is not None:
        # Requests still in flight when the run stops were counted by the server only.
        slack = CONNS * 10 + row["requests"] // 100
        if abs(mt["hits"] - row["requests"]) > slack:
            row["problems"].append(f"edgecache counted {mt['hits']:,} HITs for "
                                   f"{row['requests']:,} requests")
        if cell.startswith("h3-") and abs(mt["h3_streams"] - row["requests"]) > slack:
            row["problems"].append(f"edgecache counted {mt['h3_streams']:,} HTTP/3 streams, "
                                   f"the client {row['requests']:,} requests")
        if cell == "h3-handshake":
            hs_slack = CONNS + row["handshakes"] // 100
            if abs(mt["hs_ok"] - row["handshakes"]) > hs_slack:
                row["problems"].append(f"edgecache counted {mt['hs_ok']:,} QUIC handshakes, "
                                       f"the client {row['handshakes']:,}")
        # A timed edgeload run ends by closing its QUIC connections: in h3-handshake, one
        # per client connection may be mid-handshake then, and fails on the server. Not
        # warnings, then, unless there are more.
        for k, what, allowed in (("hs_error", "failed QUIC handshakes", CONNS),
                                 ("retries", "Retry packets", 0),
                                 ("refused", "refused QUIC connections", 0)):
            if mt[k] > allowed:
                row["warnings"].append(f"edgecache counted {mt[k]:,} {what}")
    return row


def versions():
    out = benchlib.first_line
    irq_acct = "unknown (no /proc/config.gz)"
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            irq_acct = "on" if "CONFIG_IRQ_TIME_ACCOUNTING=y" in f.read() else "off"
    except OSError:
        pass
    # edgecache's and edgeload's QUIC stack, from the lock file they were built from.
    lock = {}
    try:
        with open(os.path.join(ROOT, "Cargo.lock")) as f:
            text = f.read()
        for name in ("quinn", "quinn-proto", "quinn-udp", "h3", "h3-quinn", "rustls"):
            m = re.search(r'name = "%s"\nversion = "([^"]+)"' % re.escape(name), text)
            lock[name] = m.group(1) if m else "?"
    except OSError:
        pass
    try:
        with open("/proc/sys/net/core/rmem_max") as f:
            rmem_max = int(f.read())
    except (OSError, ValueError):
        rmem_max = None
    # Debian builds Caddy against its own Go packages: quic-go's version is the
    # package's Built-Using.
    quic_go = "?"
    try:
        p = subprocess.run(["dpkg-query", "-W", "-f", "${Built-Using}", "caddy"],
                           capture_output=True, text=True, timeout=10)
        m = re.search(r"quic-go \(= ([^)]+)\)", p.stdout)
        quic_go = m.group(1) if m else quic_go
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {
        "quic_go": quic_go,
        "edgecache": out([os.path.join(BIN, "edgecache"), "--version"]),
        "edgeload": out([os.path.join(BIN, "edgeload"), "--version"]),
        "caddy": out([need("caddy"), "version"]),
        "h2load": out(["h2load", "--version"]),
        "lock": lock,
        "kernel": os.uname().release,
        "cpu": f"{benchlib.cpu_model()}, {os.cpu_count()} CPUs",
        "irq_acct": irq_acct,
        "rmem_max": rmem_max,
    }


def main():
    ap = argparse.ArgumentParser(description="Cache hits over HTTP/3, edgecache against "
                                             "Caddy.")
    ap.add_argument("--quick", action="store_true", help="1 repetition of 2 s cells")
    ap.add_argument("--seconds", type=int,
                    help="length of each cell (default 5, 2 with --quick)")
    ap.add_argument("--repetitions", type=int,
                    help="runs of each cell per server (default 3, 1 with --quick)")
    ap.add_argument("--cells", default=",".join(CELLS),
                    help="comma separated, of: " + ",".join(CELLS))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results"))
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    a = ap.parse_args()
    a.argv = (["--quick"] if a.quick else []) + [
        f"--{k} {v}" for k, v in (("seconds", a.seconds), ("repetitions", a.repetitions))
        if v is not None]
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
        raise SystemExit("h3.py: needs 2 CPUs (server on CPU 0, client on CPU 1)")
    for tool in ("caddy", "h2load", "openssl", "taskset", "curl"):
        need(tool)
    for b in ("edgecache", "edgeorigin", "edgeload"):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            raise SystemExit(f"h3.py: {os.path.join(BIN, b)} missing; "
                             f"cargo build --release -p {b}")
    # Only the servers some chosen cell needs.
    kinds = [k for k in SERVERS if any(k in CELL_SERVERS[c] for c in cells)]

    def unwind(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, unwind)
    signal.signal(signal.SIGHUP, unwind)

    work = tempfile.mkdtemp(prefix="h3-")
    os.chmod(work, 0o755)
    started = time.time()
    origin = None
    servers = {}
    rows = []
    problems = []
    warnings = []
    logs = {}
    info = {}
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
        for kind in kinds:
            s = Server(kind, work, oport, certs)
            if kind == "caddy":
                fill_caddy_root(s, oport)
            servers[kind] = s
            s.start()
        for s in servers.values():
            problems += warm(s, work, certs, oport)
        info["warm_origin_fetches"] = origin_requests(oport)
        for rep in range(1, a.repetitions + 1):
            for cell in cells:
                order = CELL_SERVERS[cell] if rep % 2 else CELL_SERVERS[cell][::-1]
                for kind in order:
                    s = servers[kind]
                    if not s.alive():
                        problems.append(f"{cell} rep {rep} {kind}: not run, the server "
                                        "had exited")
                        continue
                    row = measure(cell, s, a.seconds, rep, work, oport)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
        ok = True
    finally:
        for s in servers.values():
            s.stop()
            logs[s.kind] = s.log_lines()
        stop_group(origin)
        if not ok:
            print(f"h3.py: stopped early; the run directory is kept: {work}", file=sys.stderr)
    for r in rows:
        problems += [f"{r['cell']} rep {r['rep']} {r['server']}: {p}" for p in r["problems"]]
        warnings += [f"{r['cell']} rep {r['rep']} {r['server']}: {w}" for w in r["warnings"]]
    write_report(a, cells, kinds, rows, problems, warnings, logs, info, started)
    if a.keep:
        print(f"run directory kept: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(a.out, "h3.md")) as f:
        print(f.read())


HOW_TO_READ = """
Compare the ratios: how many requests (or full handshakes) edgecache serves with the CPU
time its peer needs for one of its own, in the same repetition, with the same
certificate and the same bytes (above 1: edgecache needs less CPU per request). The
server under test has CPU 0 and the load generator CPU 1; edgeload's HTTP/3 client is
the same quinn + rustls stack as edgecache's, on one core, so the client is often the
limit of req/s (the server then used well under 1.00 cores): that req/s says little about
the server, while its CPU per request still does. When CPU 0 was much busier than the
server (the CPU 0 / CPU 1 column; such cells are listed under Warnings), something else
shared the server's core. Server CPU counts every thread of the server (edgecache's
admin thread; Caddy's Go runtime threads, which GOMAXPROCS=1 does not limit to one:
it bounds the threads running Go code, not the garbage collector's assists or threads in
system calls; all are pinned to CPU 0) and the kernel's work on their behalf: system
calls, and, where IRQ time accounting is off, the softirq work of loopback delivery
that ran while they were on the CPU. Caddy serves static files: each request opens,
stats, reads and closes a file in the page cache; edgecache serves cache hits read from
its disk cache (no RAM tier), which also reads a file. Caddy 2.6's quic-go (Debian's
0.29) writes one datagram per system call: it has no GSO (quic-go added it in 0.40), so
at 100 KiB the comparison with Caddy is largely one of batching, which is why the report
also sets edgecache without GSO against Caddy. On loopback GSO saves more than on a
network: the train of datagrams one `sendmsg` hands the kernel stays whole up to the
client's socket (quinn's client reads with UDP_GRO), so the per-datagram delivery work
is saved too, and that delivery (softirq) runs in the sender's system call and is
charged to the server where IRQ time accounting is off; through a NIC only the sender's
per-datagram work is saved. Ratios from one run compare; absolute figures move with the
machine and anything else running on it.
"""

TITLES = {
    "h3-1k": "HTTP/3, 1 KiB hits (edgeload --h3 -t1 -c16 --pipeline 10)",
    "h3-100k": "HTTP/3, 100 KiB hits (edgeload --h3 -t1 -c16 --pipeline 4)",
    "h3-handshake": "HTTP/3, full QUIC handshakes (edgeload --h3 -t1 -c16 --no-keepalive "
                    "--tls-no-resume, 1 KiB)",
    "h3-100k-nogso": "HTTP/3, 100 KiB hits, edgecache with GSO against without "
                     "(quic_gso = false)",
    "h2-1k": "HTTP/2 over TLS, 1 KiB hits, edgecache alone (h2load -t1 -c16 -m10)",
    "h2-100k": "HTTP/2 over TLS, 100 KiB hits, edgecache alone (h2load -t1 -c16 -m4)",
}


def ratios(rows, cell, key="requests"):
    """The cell's first server / its second, requests (or `key`) per CPU-second, per
    repetition."""
    first, second = CELL_SERVERS[cell][:2]
    by = {(r["server"], r["rep"]): r for r in rows if r["cell"] == cell}
    out = []
    for (srv, rep), e in sorted(by.items()):
        g = by.get((second, rep))
        if srv == first and g and per_cpu(e, key) and per_cpu(g, key):
            out.append(per_cpu(e, key) / per_cpu(g, key))
    return out


def cross(rows, num, den, key="requests"):
    """CPU per request of run `num` / of run `den`, each a (cell, server), per
    repetition."""
    out = []
    by = {(r["cell"], r["server"], r["rep"]): r for r in rows}
    for (cell, srv, rep), e in sorted(by.items()):
        g = by.get((*den, rep))
        if (cell, srv) == num and g and cpu_us(e, key) and cpu_us(g, key):
            out.append(cpu_us(e, key) / cpu_us(g, key))
    return out


def h3_over_h2(rows, size):
    """edgecache's CPU per request over HTTP/3 / over HTTP/2, per repetition."""
    return cross(rows, (f"h3-{size}", "edgecache"), (f"h2-{size}", "edgecache"))


def target_row(f, label, xs, goal, above):
    """One line of the Targets table: met when the median is on the right side of `goal`;
    how many repetitions were, after it."""
    if not xs:
        f.write(f"| {label} | not measured | — |\n")
        return
    on_side = [x >= goal if above else x <= goal for x in xs]
    m = statistics.median(xs)
    met = m >= goal if above else m <= goal
    f.write(f"| {label} | {med(xs, '{:.2f}')}× | **{'met' if met else 'missed'}** "
            f"({sum(on_side)} of {len(xs)} repetitions) |\n")


def write_report(a, cells, kinds, rows, problems, warnings, logs, info, started):
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "h3.md")
    cmd = " ".join(["python3 bench/h3.py"] + a.argv)
    if cells != CELLS:
        cmd += f" --cells {','.join(cells)}"
    lock = info.get("lock", {})
    with open(path, "w") as f:
        f.write("# Cache hits over HTTP/3: edgecache against Caddy, with and without GSO, "
                "and against its own HTTP/2\n\n")
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
        f.write(f"Produced by `edgebench h3`, which ran `{cmd}` on {when}: "
                f"{a.repetitions} repetition(s) of {a.seconds} s cells.\n\n")
        f.write("- Machine: " + info.get("cpu", "?") + f", Linux {info.get('kernel', '?')} "
                f"(IRQ time accounting {info.get('irq_acct', '?')}); every process on "
                "loopback; the servers on CPU 0, the load generator on CPU 1, the origin "
                f"unpinned; `net.core.rmem_max` {info.get('rmem_max')}.\n")
        f.write(f"- Versions: {info.get('edgecache', '?')} and {info.get('edgeload', '?')} "
                f"(quinn {lock.get('quinn', '?')}, quinn-proto {lock.get('quinn-proto', '?')}, "
                f"quinn-udp {lock.get('quinn-udp', '?')}, h3 {lock.get('h3', '?')}, h3-quinn "
                f"{lock.get('h3-quinn', '?')}, rustls {lock.get('rustls', '?')} on ring); "
                f"Caddy {info.get('caddy', '?')} (Go, quic-go {info.get('quic_go', '?')}, Debian's "
                f"package); {info.get('h2load', '?')}.\n")
        f.write(f"- Warm-up: {info.get('warm_origin_fetches', '?')} origin requests before "
                f"the cells ({2 * IDS} objects into each of "
                f"{sum(k.startswith('edgecache') for k in kinds)} edgecache caches, "
                f"{2 * IDS} read for Caddy's root, {2 * CADDY_BODY_CHECKS} for its body "
                "checks).\n\n")
        f.write(__doc__.split("\n\n", 3)[3].split("\n\nFor every cell")[0] + "\n\n")

        f.write("## Targets (issue 31)\n\n| target | measured: median (min–max) | result |\n"
                "|---|---|---|\n")
        target_row(f, "h3 1 KiB hits: edgecache ≥ 2× Caddy's requests per CPU-second",
                   ratios(rows, "h3-1k"), 2.0, True)
        target_row(f, "h3 1 KiB hits: edgecache's CPU per request ≤ 2× its own h2's",
                   h3_over_h2(rows, "1k"), 2.0, False)
        target_row(f, "h3 100 KiB hits: edgecache ≥ 1.5× Caddy's requests per CPU-second",
                   ratios(rows, "h3-100k"), 1.5, True)
        gso = ratios(rows, "h3-100k-nogso")
        f.write("| GSO, 100 KiB hits: requests per CPU-second with GSO / without "
                f"(no threshold: reported as a ratio) | {med(gso, '{:.2f}')}× | "
                + ("reported |\n" if gso else "not measured |\n"))
        f.write("\nMet: the median over repetitions is on the target's side; each ratio is "
                "taken within a repetition, from runs next to each other.\n\n")

        f.write("## Summary\n\n| cell | server | req/s | µs CPU/req | req per CPU-s | "
                "**ratio, req per CPU-s** |\n|---|---|---|---|---|---|\n")
        for cell in cells:
            key = "handshakes" if cell == "h3-handshake" else "requests"
            peers = CELL_SERVERS[cell]
            for srv in peers:
                sr = [r for r in rows if r["cell"] == cell and r["server"] == srv]
                if not sr:
                    continue
                if len(peers) > 1 and srv == peers[0]:
                    ratio = f"**{med(ratios(rows, cell, key), '{:.2f}')}** ({srv} / {peers[1]})"
                elif len(peers) > 1:
                    ratio = "1"
                else:
                    ratio = ""
                f.write(f"| {cell} | {srv} | {med([r.get('rps') for r in sr], '{:,.0f}')} | "
                        f"{med([cpu_us(r, key) for r in sr], '{:,.1f}')} | "
                        f"{med([per_cpu(r, key) for r in sr], '{:,.0f}')} | {ratio} |\n")
        for size in SIZES:
            xs = h3_over_h2(rows, size)
            if xs:
                f.write(f"\nedgecache's CPU per {size.replace('k', ' KiB')} request over "
                        f"HTTP/3 / over HTTP/2 (h3-{size} against h2-{size}, per "
                        f"repetition): **{med(xs, '{:.2f}')}×**.")
        xs = [1 / x for x in cross(rows, ("h3-100k-nogso", "edgecache-nogso"),
                                   ("h3-100k", "caddy"))]
        if xs:
            f.write("\nedgecache without GSO against Caddy (whose quic-go "
                    f"{info.get('quic_go', '?')} sends one datagram per system call), 100 KiB, "
                    "requests per CPU-second (h3-100k-nogso's edgecache-nogso run against "
                    "h3-100k's Caddy run of the same repetition, a few cells apart): "
                    f"**{med(xs, '{:.2f}')}×**.")
        f.write("\n\nEvery figure: median (min–max) over repetitions; h3-handshake counts "
                "full handshakes (one request each) where the other cells count requests.\n\n")

        f.write("## Cells\n\n")
        for cell in cells:
            cr = [r for r in rows if r["cell"] == cell]
            if not cr:
                continue
            f.write(f"### {cell}: {TITLES[cell]}\n\n")
            hs = cell == "h3-handshake"
            f.write("| server | req/s | server CPU, cores | client CPU, cores | CPU 0 / CPU 1 "
                    "busy | µs CPU/req | req per CPU-s | p50 / p99 µs | "
                    + ("handshakes/s | µs CPU/handshake | " if hs else "")
                    + "failed | origin fetches | ratio |\n")
            f.write("|---|---|---|---|---|---|---|---|" + ("---|---|" if hs else "")
                    + "---|---|---|\n")
            peers = CELL_SERVERS[cell]
            for srv in peers:
                sr = [r for r in cr if r["server"] == srv]
                if not sr:
                    continue
                f.write(f"| {srv} | {med([r.get('rps') for r in sr], '{:,.0f}')} | "
                        f"{med([busy(r) for r in sr], '{:.2f}')} | "
                        f"{med([busy(r, 'client_cpu_s') for r in sr], '{:.2f}')} | "
                        f"{med([cpu_frac(r, SERVER_CPU) for r in sr], '{:.0%}')} / "
                        f"{med([cpu_frac(r, CLIENT_CPU) for r in sr], '{:.0%}')} | "
                        f"{med([cpu_us(r) for r in sr], '{:,.1f}')} | "
                        f"{med([per_cpu(r) for r in sr], '{:,.0f}')} | "
                        f"{med([r.get('p50_us') for r in sr], '{:,.0f}')} / "
                        f"{med([r.get('p99_us') for r in sr], '{:,.0f}')} | ")
                if hs:
                    f.write(f"{med([hs_rate(r) for r in sr], '{:,.0f}')} | "
                            f"{med([cpu_us(r, 'handshakes') for r in sr], '{:,.1f}')} | ")
                fails = sum((r.get("errors") or 0) + (r.get("non_2xx") or 0) for r in sr)
                fails_txt = str(fails) if fails == 0 else f"**{fails}**"
                if any("requests" not in r for r in sr):
                    fails_txt += " (a run did not finish)"
                key = "handshakes" if hs else "requests"
                ratio = (f"**{med(ratios(rows, cell, key), '{:.2f}')}**" if srv == peers[0]
                         and len(peers) > 1 else "1" if len(peers) > 1 else "")
                f.write(f"{fails_txt} | {sum(r['origin_fetches'] for r in sr)} | {ratio} |\n")
            e = [r for r in cr if r.get("metrics")]
            if e and not cell.startswith("h2-"):
                f.write("\nedgecache's own counts (`/metrics`, increase over the cell) against "
                        "the client's: " + "; ".join(
                            f"{r['server']} rep {r['rep']}: {r['metrics']['h3_streams']:,} "
                            f"HTTP/3 streams, {r['metrics']['hits']:,} HITs, "
                            f"{r['metrics']['hs_ok']:,} QUIC handshakes (client: "
                            f"{r.get('requests', 0):,} requests, {r.get('handshakes', 0):,} "
                            f"handshakes), {r['metrics']['hs_error']:,} failed handshakes and "
                            f"{r['metrics']['conn_errors']:,} connections ended on an error "
                            f"or idle timeout, {r['metrics']['active_after']:,} connections "
                            "open after the client exited" for r in e) + ".\n")
                f.write("\nedgeload ends a timed run by closing its QUIC connections "
                        "(CONNECTION_CLOSE): in h3-handshake the ones still mid-handshake "
                        "then fail on the server (at most one per client connection).\n")
            f.write("\n")

        f.write("## How to read this\n\n" + " ".join(HOW_TO_READ.split()) + "\n\n")

        f.write("## Errors\n\n")
        if problems:
            f.write("".join(f"- {p}\n" for p in problems))
        else:
            f.write("None: no failed request, no non-2xx answer, no failed handshake, no "
                    "origin fetch during a cell, every HIT and body check passed, "
                    "edgecache's stream and handshake counts agree with the client's.\n")
        f.write("\n## Warnings\n\n")
        if warnings:
            f.write("".join(f"- {w}\n" for w in warnings))
        else:
            f.write(f"None: in no cell did other processes take more than {SHARED_CPU:.0%} of "
                    "CPU 0, and edgecache counted no failed QUIC handshake, Retry or refused "
                    "connection.\n")
        f.write("\n## Server logs\n\n")
        for srv in kinds:
            lines = logs.get(srv, [])
            if lines:
                f.write(f"{srv} ({len(lines)} lines, the last 20):\n\n```\n"
                        + "\n".join(lines[-20:]) + "\n```\n\n")
            else:
                f.write(f"{srv}: empty error log and stderr.\n\n")
        f.write("## Raw\n\n```json\n" + "\n".join(json.dumps(r) for r in rows) + "\n```\n")
    return path


def hs_rate(r):
    if r.get("handshakes") is None or not r.get("duration_s"):
        return None
    return r["handshakes"] / r["duration_s"]


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("h3.py: interrupted; every process it started is stopped", file=sys.stderr)
        sys.exit(130)
