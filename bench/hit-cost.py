#!/usr/bin/env python3
"""Cost of one small cache hit: user-space instructions (callgrind) and syscalls
(strace -c), edgecache (RAM tier, disk tier) against nginx proxy_cache, same load.

Usage (root not needed; valgrind, strace and nginx installed, binaries built with
`cargo build --release`):

    python3 bench/hit-cost.py [--size 1k] [--out docs/results/hit-cost.json]
    # the embedded default's kind of location: `compress`, a text object, clients
    # sending `Accept-Encoding: gzip` (hits answered with the stored gzip copy);
    # instructions only, edgecache's RAM tier only
    python3 bench/hit-cost.py --compress --servers edgecache-ram --phases callgrind

What it does, per server (edgecache with `[memory_cache]`, edgecache without it, nginx
with `proxy_cache` and `open_file_cache`; one worker each, access logs off, keep-alive):
1. Start the origin (edgeorigin), then the server under `valgrind --tool=callgrind
   --separate-threads=yes`, warm the object until `X-Cache-Status: HIT` and send 500
   warm-up requests (edgeload, 1 connection).
2. Instructions: zero the counters, send N1 requests, dump; zero, send N2, dump. The
   busiest thread's (Ir(N2) - Ir(N1)) / (N2 - N1) is the cost of one request with the
   fixed costs (connection set-up, the dump itself) cancelled out. Twice, median kept.
3. Syscalls: the server again without valgrind, `strace -c -f -p PID` around N
   requests on 1 connection and on 16 connections; calls per request, with and
   without `epoll_wait` (a wake-up serves several requests when connections queue).

Deterministic enough to compare: callgrind counts instructions, not time.
HITCOST_KEEP=1 keeps each run's directory (its callgrind files) in /tmp/hitcost-*.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchlib import (ROOT, BIN, add_callgrind_args, callgrind_ir, edgeload_requests,
                      free_port, spawn_origin, strace_counts, wait_port, CACHED_LOCATION,
                      MEMORY_64M, cost_node_toml, listen_toml)



def get(port, path, headers=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, dict(r.headers), r.read()


# `--compress`: the request headers every request carries (set by main).
HEADERS = {}


def load(port, path, requests, connections=1):
    extra = [a for k, v in HEADERS.items() for a in ("-H", f"{k}: {v}")]
    return edgeload_requests(f"http://127.0.0.1:{port}{path}", requests, connections, "120s",
                             extra)


def edgecache_config(dir, port, origin, memory, compress=False):
    # Without: `size = "off"` (the RAM tier is on by default, `size = "auto"`).
    mem = (MEMORY_64M + 'policy = "s3fifo"\n' if memory
           else '[memory_cache]\nsize = "off"\n')
    text = (cost_node_toml(dir, origin, listen_toml(port), mem)
            + '[[location]]\nprefix = "/"\n' + CACHED_LOCATION)
    if compress:
        # As the embedded default config's location.
        text += 'compress = ["zstd", "br", "gzip"]\n'
    path = os.path.join(dir, "edgecache.toml")
    with open(path, "w") as f:
        f.write(text)
    return [os.path.join(BIN, "edgecache"), "-c", path]


def nginx_config(dir, port, origin):
    text = f'''daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/cbt; proxy_temp_path {dir}/pt;
    fastcgi_temp_path {dir}/ft; uwsgi_temp_path {dir}/ut; scgi_temp_path {dir}/st;
    sendfile on; tcp_nodelay on;
    keepalive_timeout 75s; keepalive_requests 1000000;
    open_file_cache max=1000 inactive=60s;
    proxy_cache_path {dir}/cache levels=1:2 keys_zone=bench:64m max_size=4g inactive=1h use_temp_path=off;
    upstream origin {{ server 127.0.0.1:{origin}; keepalive 4; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://origin; proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache bench; proxy_cache_valid 200 10m;
            add_header X-Cache-Status $upstream_cache_status;
        }}
    }}
}}
'''
    path = os.path.join(dir, "nginx.conf")
    with open(path, "w") as f:
        f.write(text)
    return ["nginx", "-c", path, "-p", dir]


def warm(port, path):
    for _ in range(50):
        _, h, _ = get(port, path, HEADERS)
        if h.get("X-Cache-Status") == "HIT":
            break
        time.sleep(0.05)
    # The RAM tier admits on the first disk hit: a few more make the steady state.
    for _ in range(5):
        get(port, path, HEADERS)
    load(port, path, 500)


def strace_calls(cmd, port, path, n, connections, work):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         cwd=work, start_new_session=True)
    try:
        wait_port(port, timeout=60)
        warm(port, path)
        log = os.path.join(work, f"strace-{connections}.txt")
        s = subprocess.Popen(["strace", "-c", "-f", "-p", str(p.pid), "-o", log],
                             stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        done = load(port, path, n, connections)
        s.send_signal(signal.SIGINT)
        s.wait()
        calls = strace_counts(log)
        # Noise floor: calls made a handful of times are timers and housekeeping.
        per = {k: v / done for k, v in calls.items() if v >= done / 20}
        return per
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="1k")
    add_callgrind_args(ap, reps=2)
    ap.add_argument("--strace-requests", type=int, default=20000)
    ap.add_argument("--out")
    ap.add_argument("--servers", default="edgecache-ram,edgecache-disk,nginx")
    ap.add_argument("--phases", default="callgrind,strace",
                    help="callgrind (instructions), strace (syscalls), or both")
    ap.add_argument("--compress", action="store_true",
                    help="edgecache's location compresses (as the embedded default "
                         "config's); a text object requested with Accept-Encoding: gzip")
    a = ap.parse_args()
    path = f"/obj/{a.size}/1"
    if a.compress:
        path = f"/txt/{a.size}/1"
        HEADERS["Accept-Encoding"] = "gzip"
    results = {}
    origin_port = free_port()
    origin = spawn_origin(origin_port)
    try:
        wait_port(origin_port, timeout=60)
        for name in a.servers.split(","):
            if name == "nginx" and not shutil.which("nginx"):
                print("nginx not installed (bench/peers/install.sh): skipped", file=sys.stderr)
                continue
            res = {}
            for phase in a.phases.split(","):
                work = tempfile.mkdtemp(prefix=f"hitcost-{name}-")
                port = free_port()
                if name == "nginx":
                    cmd = nginx_config(work, port, origin_port)
                else:
                    cmd = edgecache_config(work, port, origin_port, name == "edgecache-ram",
                                           a.compress)
                if phase == "callgrind":
                    med, all_ = callgrind_ir(cmd, port, work, lambda: warm(port, path),
                                             lambda n: load(port, path, n),
                                             a.n1, a.n2, a.reps, start_timeout=120)
                    res["ir_per_request"] = round(med)
                    res["ir_samples"] = [round(x) for x in all_]
                else:
                    for c in (1, 16):
                        per = strace_calls(cmd, port, path, a.strace_requests, c, work)
                        res[f"syscalls_c{c}"] = {k: round(v, 3) for k, v in sorted(per.items())}
                        res[f"syscalls_c{c}_total"] = round(sum(per.values()), 2)
                        res[f"syscalls_c{c}_no_epoll"] = round(
                            sum(v for k, v in per.items() if not k.startswith("epoll")), 2)
                if not os.environ.get("HITCOST_KEEP"):
                    shutil.rmtree(work, ignore_errors=True)
            results[name] = res
            print(name, json.dumps(res), flush=True)
    finally:
        origin.kill()
    if "ir_per_request" in results.get("nginx", {}):
        base = results["nginx"]["ir_per_request"]
        for name, r in results.items():
            r["ir_vs_nginx"] = round(r["ir_per_request"] / base, 3)
    print("\n| server | Ir/request | vs nginx | syscalls/req (1 conn) | without epoll_wait | syscalls/req (16 conns) | without epoll_wait |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r.get('ir_per_request', '')} | {r.get('ir_vs_nginx', '')} | "
              f"{r.get('syscalls_c1_total', '')} | {r.get('syscalls_c1_no_epoll', '')} | "
              f"{r.get('syscalls_c16_total', '')} | {r.get('syscalls_c16_no_epoll', '')} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"size": a.size, "compress": a.compress, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
