#!/usr/bin/env python3
"""Which QUIC stack for HTTP/3 (issue 31, scope item 2): cost per request and per
handshake of quinn + h3 and quiche's h3, with Caddy (Go, quic-go) as a reference point.

Usage (valgrind, strace and Debian's ngtcp2-client installed; caddy optional):

    (cd bench/quic-stacks && cargo build --release --features quinn,quiche)
    python3 bench/quic-stacks/run.py [--out docs/results/quic-stacks.json]

Every server is a minimal HTTP/3 server on 127.0.0.1 answering `GET /1k` with 1,024
bytes, one thread (src/bin/*.rs; Caddy with GOMAXPROCS=1 and a 1,024-byte static file),
all with the same self-signed certificate made here. The load client is the same for all
and not ours: ngtcp2's `gtlsclient` (GnuTLS), `-n N` requests on one connection (it opens
as many concurrent streams as the server allows, 100 for each of ours).

1. Instructions (callgrind, the method of bench/hit-cost.py via benchlib.callgrind_ir):
   the server under `valgrind --tool=callgrind`; zero, N1 requests on one connection,
   dump; zero, N2, dump: (Ir(N2) - Ir(N1)) / (N2 - N1) is one request with the
   connection's fixed cost cancelled. Handshakes: the same with C1 then C2 connections of
   one request each (a full handshake each: no session file), so one handshake plus one
   request. Caddy is left out here (a Go runtime's threads: the busiest thread is not the
   cost).
2. System calls: `strace -c -f` on each server around `--strace-requests` requests on
   one connection, calls per request (the batching each stack's I/O does).
3. CPU time: the servers without valgrind, user + system CPU seconds of the process
   (/proc/PID/stat) around R requests on one connection and around H connections, each
   stack in turn, `--reps` rounds: ratios within a round, median and range over rounds.
   Timings on a 2-core machine shared with other jobs: only the ratios mean anything.
"""

import argparse
import atexit
import contextlib
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchlib import callgrind_ir, free_port, strace_counts  # noqa: E402

BIN = os.path.join(HERE, "target", "release")
# name: (binary, extra arguments). quiche-gso: the same quiche server sending runs of
# datagrams with one GSO sendmsg each, the batching quinn-udp does for quinn.
STACKS = {"quinn": ("quinn-h3", []), "quiche": ("quiche-h3", []),
          "quiche-gso": ("quiche-h3", ["gso"])}
STATUS = re.compile(rb":status: (\d+)")


def make_cert(work):
    """One self-signed P-256 certificate for 127.0.0.1 and localhost: (cert, key)."""
    cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "30",
                    "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


def gtls(port, n, timeout, quiet=True):
    """`n` GET /1k on one new connection; the number of 200 responses seen (when not
    quiet: the client prints each response head), or n when quiet and it exited 0."""
    cmd = ["gtlsclient", "--exit-on-all-streams-close", "--no-quic-dump",
           "--no-http-dump", "--timeout=10s", "-n", str(n)]
    if quiet:
        cmd.append("-q")
    cmd += ["127.0.0.1", str(port), f"https://127.0.0.1:{port}/1k"]
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 0
    if quiet:
        return n if r.returncode == 0 else 0
    return sum(1 for m in STATUS.finditer(r.stdout + r.stderr) if m.group(1) == b"200")


def requests(port, n):
    got = gtls(port, n, timeout=600)
    if got != n:
        raise SystemExit(f"{n} requests on port {port}: {got} answered")
    return n


def connections(port, n):
    for _ in range(n):
        requests(port, 1)
    return n


def ready(port):
    """Wait until one full request is answered 200 (the servers listen on UDP only)."""
    def wait(timeout):
        end = time.time() + timeout
        while time.time() < end:
            if gtls(port, 1, timeout=30, quiet=False) == 1:
                return
            time.sleep(0.2)
        raise SystemExit(f"no HTTP/3 answer on {port}")
    return wait


def server_cmd(name, port, cert, key, work):
    """(argv, env) of a server; Caddy gets a Caddyfile and a 1 KiB file in `work`."""
    if name in STACKS:
        binary, extra = STACKS[name]
        return [os.path.join(BIN, binary), str(port), cert, key, *extra], None
    root = os.path.join(work, "root")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "1k"), "wb") as f:
        f.write(b"x" * 1024)
    conf = os.path.join(work, "Caddyfile")
    with open(conf, "w") as f:
        f.write(f"""{{
\tadmin off
\tauto_https off
\tlog {{
\t\toutput discard
\t}}
\tservers {{
\t\tprotocols h1 h2 h3
\t}}
}}
https://127.0.0.1:{port} {{
\ttls {cert} {key}
\troot * {root}
\tfile_server
}}
""")
    env = dict(os.environ, GOMAXPROCS="1", XDG_DATA_HOME=work, XDG_CONFIG_HOME=work,
               HOME=work)
    return ["caddy", "run", "--adapter", "caddyfile", "--config", conf], env


def cpu_split(pid):
    """(user, system) CPU seconds of a process, all threads, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


@contextlib.contextmanager
def warm_server(name, cert, key, what):
    """A server started (own process group, own directory), answering, and warmed with
    500 requests: yields (process, port, directory); killed and cleaned up after."""
    work = tempfile.mkdtemp(prefix=f"quicstk-{what}-{name}-")
    port = free_port()
    cmd, env = server_cmd(name, port, cert, key, work)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, cwd=work, start_new_session=True)
    try:
        ready(port)(60)
        requests(port, 500)
        yield p, port, work
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        shutil.rmtree(work, ignore_errors=True)


def cpu_round(name, cert, key, n_req, n_conn):
    """One server start: (user, system) CPU seconds per request on one connection, and
    per connection of one request."""
    with warm_server(name, cert, key, "cpu") as (p, port, _):
        c0 = cpu_split(p.pid)
        requests(port, n_req)
        c1 = cpu_split(p.pid)
        connections(port, n_conn)
        c2 = cpu_split(p.pid)
    per = lambda a, b, n: ((b[0] - a[0]) / n, (b[1] - a[1]) / n)  # noqa: E731
    return per(c0, c1, n_req), per(c1, c2, n_conn)


def syscalls(name, cert, key, n_req):
    """System calls per request of one server (strace -c -f) around n_req requests on one
    connection; calls made fewer than n_req/200 times (timers, housekeeping) left out."""
    with warm_server(name, cert, key, "strace") as (p, port, work):
        log = os.path.join(work, "strace.txt")
        st = subprocess.Popen(["strace", "-c", "-f", "-p", str(p.pid), "-o", log],
                              stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        requests(port, n_req)
        st.send_signal(signal.SIGINT)
        st.wait()
        calls = strace_counts(log)
    return {k: round(v / n_req, 3) for k, v in sorted(calls.items()) if v >= n_req / 200}


def ratio(a, b):
    """a / b, or nan when b is nothing (too few clock ticks measured)."""
    return a / b if b else float("nan")


def spread(xs):
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3),
            "max": round(max(xs), 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stacks", default="quinn,quiche,quiche-gso")
    ap.add_argument("--caddy", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--n1", type=int, default=500)
    ap.add_argument("--n2", type=int, default=3000)
    ap.add_argument("--c1", type=int, default=10)
    ap.add_argument("--c2", type=int, default=60)
    ap.add_argument("--reps", type=int, default=2, help="callgrind repetitions")
    ap.add_argument("--cpu-requests", type=int, default=20000)
    ap.add_argument("--cpu-connections", type=int, default=300)
    ap.add_argument("--cpu-reps", type=int, default=5)
    ap.add_argument("--skip-callgrind", action="store_true")
    ap.add_argument("--strace-requests", type=int, default=20000,
                    help="requests traced for the syscall counts; 0: no strace phase")
    ap.add_argument("--out")
    a = ap.parse_args()
    stacks = a.stacks.split(",")
    for s in stacks:
        if not os.path.exists(os.path.join(BIN, STACKS[s][0])):
            raise SystemExit(f"{STACKS[s][0]} not built: see the usage in this file")
    top = tempfile.mkdtemp(prefix="quicstk-")
    atexit.register(shutil.rmtree, top, True)  # also when a phase fails
    cert, key = make_cert(top)
    res = {"stacks": {s: {} for s in stacks}}

    if not a.skip_callgrind:
        for s in stacks:
            for what, n1, n2, load in (("ir_per_request", a.n1, a.n2, requests),
                                       ("ir_per_connection", a.c1, a.c2, connections)):
                work = tempfile.mkdtemp(prefix=f"quicstk-cg-{s}-")
                port = free_port()
                cmd, _ = server_cmd(s, port, cert, key, work)
                med, all_ = callgrind_ir(cmd, port, work, lambda: requests(port, 200),
                                         lambda n: load(port, n), n1, n2, a.reps,
                                         start_timeout=120, ready=ready(port))
                res["stacks"][s][what] = round(med)
                res["stacks"][s][what + "_samples"] = [round(x) for x in all_]
                shutil.rmtree(work, ignore_errors=True)
                print(s, what, round(med), [round(x) for x in all_], flush=True)

    names = stacks + (["caddy"] if a.caddy and shutil.which("caddy") else [])
    if a.strace_requests:
        for s in names:
            per = syscalls(s, cert, key, a.strace_requests)
            res["stacks"][s] = res["stacks"].get(s, {})
            res["stacks"][s]["syscalls_per_request"] = per
            res["stacks"][s]["syscalls_per_request_total"] = round(sum(per.values()), 2)
            print(s, "syscalls per request", round(sum(per.values()), 2), per, flush=True)
    rounds = []
    for r in range(a.cpu_reps):
        row = {}
        for s in names:
            row[s] = cpu_round(s, cert, key, a.cpu_requests, a.cpu_connections)
            (ru, rs), (cu, cs) = row[s]
            print(f"round {r} {s}: CPU/request {ru * 1e6:.1f} us user + {rs * 1e6:.1f} us "
                  f"sys; CPU/connection {cu * 1e6:.0f} us user + {cs * 1e6:.0f} us sys",
                  flush=True)
        rounds.append(row)
    if not rounds:
        names = []
    base = stacks[0]
    total = lambda t: t[0] + t[1]  # noqa: E731
    for s in names:
        d = res["stacks"].setdefault(s, {})
        for i, what in ((0, "request"), (1, "connection")):
            d[f"cpu_us_per_{what}"] = spread([total(row[s][i]) * 1e6 for row in rounds])
            d[f"cpu_user_us_per_{what}"] = spread([row[s][i][0] * 1e6 for row in rounds])
            d[f"cpu_sys_us_per_{what}"] = spread([row[s][i][1] * 1e6 for row in rounds])
            d[f"cpu_per_{what}_vs_{base}"] = spread(
                [ratio(total(row[s][i]), total(row[base][i])) for row in rounds])
            d[f"cpu_user_per_{what}_vs_{base}"] = spread(
                [ratio(row[s][i][0], row[base][i][0]) for row in rounds])
    if not a.skip_callgrind and len(stacks) > 1:
        for s in stacks:
            d = res["stacks"][s]
            d[f"ir_per_request_vs_{base}"] = round(
                d["ir_per_request"] / res["stacks"][base]["ir_per_request"], 3)
            d[f"ir_per_connection_vs_{base}"] = round(
                d["ir_per_connection"] / res["stacks"][base]["ir_per_connection"], 3)
    res["params"] = vars(a)

    fmt = lambda x: f"{x['median']} ({x['min']}-{x['max']})"  # noqa: E731
    print(f"\n| stack | Ir/request | Ir/connection | CPU/request vs {base} | user only | "
          f"CPU/connection vs {base} | user only |")
    print("|---|---|---|---|---|---|---|")
    for s in names:
        d = res["stacks"][s]
        print(f"| {s} | {d.get('ir_per_request', '')} | {d.get('ir_per_connection', '')} | "
              f"{fmt(d[f'cpu_per_request_vs_{base}'])} | "
              f"{fmt(d[f'cpu_user_per_request_vs_{base}'])} | "
              f"{fmt(d[f'cpu_per_connection_vs_{base}'])} | "
              f"{fmt(d[f'cpu_user_per_connection_vs_{base}'])} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
