#!/usr/bin/env python3
"""CPU of a worker holding many idle keep-alive connections, and of reclaiming them at
worker_connections: two edgecache builds side by side (docs/results/idle-parking.md).

Usage: python3 bench/idle-parking.py --bin old=/tmp/edgecache-old --bin new=target/release/edgecache
       [--connections N] [--seconds 10] [--extra 2000] [--rounds 3]

Each build (one worker, a `return` 200 on /, timeouts of an hour) gets N connections on
127.0.0.1, each sending one request and reading the answer; they then wait idle, parked
by the worker (checked in /status). Measured:
- idle: the worker thread's CPU over `--seconds` (its schedstat run time, in ns, and
  utime+stime from /proc/PID/task/TID/stat), nothing else happening;
- reclaim: with worker_connections = N (full), `--extra` new connections, each of which
  needs idle ones closed to make room (32 at a time); the worker's CPU over that phase
  per new connection.
The builds alternate within each round, so both see the same machine. N defaults to what
the descriptor limit leaves (the client holds N + extra sockets, the server N).
"""

import argparse
import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time

from benchlib import free_port, get_json, raise_nofile, read_answers, wait_port


def config(dir, port, admin, max_conns):
    path = os.path.join(dir, "edgecache.toml")
    with open(path, "w") as f:
        f.write(f'''workers = 1
worker_cpu_affinity = "off"
access_log = "off"
keepalive_timeout = "3600s"
client_header_timeout = "3600s"
worker_connections = {max_conns}
error_log = {{ path = "{dir}/error.log", level = "warn" }}
[[listen]]
addr = "127.0.0.1:{port}"
[[location]]
prefix = "/"
return = {{ status = 200, body = "ok\\n" }}
[admin]
listen = "127.0.0.1:{admin}"
allow = ["127.0.0.1/32"]
''')
    return path


def worker_tid(pid, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == "worker-0":
                    return int(tid)
        time.sleep(0.1)
    raise SystemExit("no worker-0 thread")


def cpu(pid, tid):
    """(run time ns from schedstat, utime+stime in clock ticks) of one thread."""
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        ns = int(f.read().split()[0])
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ns, ticks


def connect(port, n):
    req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(req)
        socks.append(s)
    read_answers(socks)
    return socks


def wait_parked(admin, n, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        st = get_json(admin, "/status")
        parked = sum(w.get("parked", 0) for w in st.get("workers", []))
        if parked >= n:
            return parked
        time.sleep(0.5)
    raise SystemExit(f"only {parked} of {n} parked")


def run(binary, n, extra, seconds):
    work = tempfile.mkdtemp(prefix="idle-parking-")
    port, admin = free_port(), free_port()
    out = {}
    socks = []
    p = subprocess.Popen([binary, "-c", config(work, port, admin, n)], cwd=work,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, preexec_fn=raise_nofile)
    try:
        wait_port(port)
        wait_port(admin)
        tid = worker_tid(p.pid)
        socks = connect(port, n - 1)  # the admin's own connection takes no worker slot
        time.sleep(1.0)
        out["parked"] = wait_parked(admin, n - 1)
        time.sleep(2.0)  # /status and the first ticks settled
        a = cpu(p.pid, tid)
        time.sleep(seconds)
        b = cpu(p.pid, tid)
        out["idle_ns_per_s"] = (b[0] - a[0]) / seconds
        out["idle_ticks"] = b[1] - a[1]
        # Full: every new connection needs room made.
        a = cpu(p.pid, tid)
        t = time.time()
        more = connect(port, extra)
        out["reclaim_wall_s"] = time.time() - t
        b = cpu(p.pid, tid)
        socks += more
        out["reclaim_ns_per_conn"] = (b[0] - a[0]) / extra
        st = get_json(admin, "/status")
        out["reclaimed"] = st["totals"].get("reclaimed")
        return out
    finally:
        for s in socks:
            s.close()
        os.killpg(p.pid, 9)
        p.wait()
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="NAME=PATH")
    ap.add_argument("--connections", type=int, default=0)
    ap.add_argument("--extra", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    raise_nofile()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    n = a.connections or min(100_000, hard - a.extra - 500)
    bins = [b.split("=", 1) for b in a.bin]
    print(f"{n} idle connections, {a.extra} extra, {a.seconds:.0f} s idle, "
          f"descriptor limit {hard}")
    print("| round | build | parked | idle worker CPU (us/s) | idle utime+stime (ticks) "
          "| reclaim CPU per new connection (us) | reclaimed |")
    print("|---|---|---|---|---|---|---|")
    for r in range(a.rounds):
        for name, path in bins:
            o = run(path, n, a.extra, a.seconds)
            print(f"| {r + 1} | {name} | {o['parked']} | {o['idle_ns_per_s'] / 1e3:.1f} "
                  f"| {o['idle_ticks']} | {o['reclaim_ns_per_conn'] / 1e3:.1f} "
                  f"| {o['reclaimed']} |", flush=True)


if __name__ == "__main__":
    main()
