#!/usr/bin/env python3
"""Cost of one cache miss (the fill path): syscalls (strace -c -f -p) per miss,
edgecache (one or more binaries: before/after a change) against nginx proxy_cache, same
load. (CPU per miss is `edgebench fill`'s: pinned, interleaved, repeated.)

Usage (root not needed; strace and nginx installed, binaries built with
`cargo build --release`):

    python3 bench/fill-cost.py [--sizes 4k,100k,10m] [--requests 2000]
        [--edgecache after=target/release/edgecache,before=/tmp/old/edgecache]
        [--out docs/results/fill-cost.json]

Per server and size (one worker, access log off, keep-alive clients and upstream, no
RAM tier; the configs of bench/hit-cost.py): the server under `strace -c -f -p PID`
around N misses over 16 connections (edgeload `--paths 4294967295`: every request a new
id, so a miss; the origin's request count checks it); calls per miss (calls made fewer
than N/20 times are left out as housekeeping).
The origin (edgeorigin) checks nothing; edgeload counts answers.
"""

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchlib import (BIN, edgeload_requests, free_port, origin_requests, spawn_origin,
                      strace_counts, wait_port)

_spec = importlib.util.spec_from_file_location(
    "hit_cost", os.path.join(os.path.dirname(os.path.abspath(__file__)), "hit-cost.py"))
hit_cost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hit_cost)

IDS = "4294967295"


def misses(port, size, n, connections=16):
    return edgeload_requests(f"http://127.0.0.1:{port}/obj/{size}", n, connections, "300s",
                             extra=("--paths", IDS))


def start(name, binary, work, origin_port):
    port = free_port()
    if name == "nginx":
        cmd = hit_cost.nginx_config(work, port, origin_port)
    else:
        cmd = hit_cost.edgecache_config(work, port, origin_port, False)
        cmd[0] = binary
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         cwd=work, start_new_session=True)
    wait_port(port, timeout=60)
    misses(port, "4k", 200)  # connections to the origin, first allocations
    return p, port


def strace_per_miss(p, port, size, n, work, origin_port):
    log = os.path.join(work, f"strace-{size}.txt")
    o0 = origin_requests(origin_port)
    s = subprocess.Popen(["strace", "-c", "-f", "-p", str(p.pid), "-o", log],
                         stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    done = misses(port, size, n)
    fetched = origin_requests(origin_port) - o0
    s.send_signal(signal.SIGINT)
    s.wait()
    calls = strace_counts(log)
    return {k: v / done for k, v in calls.items() if v >= done / 20}, fetched / max(done, 1)


def stop(p):
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4k,100k,10m")
    ap.add_argument("--requests", type=int, default=3000,
                    help="misses per measurement (a tenth of it for sizes over 1 MiB)")
    ap.add_argument("--edgecache", default=f"edgecache={os.path.join(BIN, 'edgecache')}",
                    help="NAME=BINARY[,NAME=BINARY...]")
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    servers = [(n, os.path.abspath(b)) for n, b in (x.split("=", 1) for x in a.edgecache.split(","))]
    if not a.no_nginx and shutil.which("nginx"):
        servers.append(("nginx", None))
    results = {}
    origin_port = free_port()
    origin = spawn_origin(origin_port)
    try:
        wait_port(origin_port, timeout=60)
        for size in a.sizes.split(","):
            n = a.requests // 10 if size.endswith(("m", "g")) else a.requests
            for name, binary in servers:
                work = tempfile.mkdtemp(prefix=f"fillcost-{name}-")
                p, port = start(name, binary, work, origin_port)
                try:
                    per, share = strace_per_miss(p, port, size, n, work, origin_port)
                finally:
                    stop(p)
                    shutil.rmtree(work, ignore_errors=True)
                r = {
                    "origin_fetches_per_request": round(share, 3),
                    "syscalls": {k: round(v, 3) for k, v in sorted(per.items())},
                    "syscalls_total": round(sum(per.values()), 2),
                }
                results.setdefault(size, {})[name] = r
                print(size, name, json.dumps(r), flush=True)
    finally:
        origin.kill()
    print("\n| size | server | syscalls/miss | vs nginx | origin fetches/request |")
    print("|---|---|---|---|---|")
    for size, rs in results.items():
        base = rs.get("nginx", {}).get("syscalls_total")
        for name, r in rs.items():
            vs = f"{r['syscalls_total'] / base:.2f}" if base else ""
            print(f"| {size} | {name} | {r['syscalls_total']} | {vs} | "
                  f"{r['origin_fetches_per_request']} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"requests": a.requests, "results": results}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
