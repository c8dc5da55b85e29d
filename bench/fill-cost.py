#!/usr/bin/env python3
"""Cost of one cache miss (the fill path): syscalls (strace -c -f -p) per miss, or with
`--cpu` CPU time and context switches per miss, or with `--callgrind` user-space
instructions per miss, edgecache (one or more binaries:
before/after a change) against nginx proxy_cache, same load. (Req/s per CPU under
load is `edgebench fill`'s: pinned, interleaved, repeated.)

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

`--perf-stat` (root): the same counts from perf's syscall tracepoints instead of strace,
plus context switches per miss; the server runs unstopped (strace stops a thread at every
syscall, which also counts as a voluntary context switch and so shuts `auto`'s write
gate: under strace every write goes to the pool).

`--cpu [--rounds 3] [--perf DIR]`: no strace; every thread of the server pinned to CPU 0,
this script and edgeload to CPU 1 (the origin unpinned). Per miss over N misses after
N/4 warm ones: the server's CPU time (user + system, all its threads, /proc), split
into user and kernel time, and its threads' context switches (voluntary + involuntary);
the servers take turns, `--rounds` times, and the median (min-max) is printed, then
per-round ratios to nginx: CPU per miss, and edgecache's kernel time alone against
nginx's whole CPU (the floor no user-space change goes under). With `--perf DIR`, the first
round runs `perf record -e cpu-clock -g -C 0` around each measurement into
DIR/<server>-<size>.data and prints where CPU 0's samples went by thread name (pool
threads summed) and object (kernel, binary, libc).

`--callgrind [--n1 500 --n2 2500]` (edgecache binaries only): each server under
`valgrind --tool=callgrind`, warmed with 200 misses; the counters zeroed, N1 misses,
dumped; zeroed, N2 misses, dumped. (Ir(N2) - Ir(N1)) / (N2 - N1) over every thread of
the process (the worker, the file I/O pool, the cache's manager: a miss's work is
spread over them) is one miss with the fixed costs cancelled. Deterministic to about
0.5%: compare builds with it, not with CPU time on a noisy machine.
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

from benchlib import (BIN, PerfStat, callgrind_ir, edgeload_requests, free_port,
                      group_cpu_split, group_ctxsw, group_pids, origin_requests, spawn_origin,
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


# `--perf-stat`: the syscalls counted by name (tracepoints; the total is every syscall).
PERF_SYSCALLS = ("futex", "getrusage", "pwritev", "pwritev2", "pwrite64", "rename",
                 "renameat2", "writev", "readv", "sendto", "recvfrom", "sendfile64",
                 "epoll_wait", "epoll_ctl", "write", "read", "openat", "statx", "newfstatat",
                 "mkdir", "close", "connect", "socket", "ioctl", "chmod", "getsockopt",
                 "setsockopt")


def perf_stat_per_miss(p, port, size, n, work, origin_port):
    """strace_per_miss by perf's tracepoints: the server runs at full speed, unstopped
    (strace stops the thread at every syscall, which also makes each one a voluntary
    context switch: `auto`'s write gate then sends every write to the pool, see
    edge_aio::write_gate). Adds context switches per miss (all threads)."""
    o0 = origin_requests(origin_port)
    events = ["raw_syscalls:sys_enter", "context-switches"] + [
        f"syscalls:sys_enter_{c}" for c in PERF_SYSCALLS]
    pids = ",".join(str(x) for x in group_pids(p.pid))
    stat = PerfStat(events, ["-p", pids], os.path.join(work, f"perf-stat-{size}.txt"),
                    settle=1.0)
    done = misses(port, size, n)
    fetched = origin_requests(origin_port) - o0
    counts = stat.stop()
    total = counts.pop("sys_enter", 0.0)
    switches = counts.pop("context-switches", 0.0)
    calls = {k.removeprefix("sys_enter_"): v for k, v in counts.items()}
    per = {k: v / done for k, v in calls.items() if v >= done / 20}
    per["(other)"] = max(total - sum(calls.values()), 0) / done
    return per, fetched / max(done, 1), switches / done


def stop(p):
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def cpu_per_miss(p, port, size, n, perf_out):
    for pid in group_pids(p.pid):  # nginx: master and workers
        subprocess.run(["taskset", "-apc", "0", str(pid)], stdout=subprocess.DEVNULL,
                       check=True)
    misses(port, size, max(n // 4, 1))
    rec = None
    if perf_out:
        rec = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-g", "-C", "0",
                                "-o", perf_out], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    (u0, k0), sw0 = group_cpu_split(p.pid), group_ctxsw(p.pid)
    t0 = time.monotonic()
    done = misses(port, size, n)
    wall = time.monotonic() - t0
    (u1, k1), sw = group_cpu_split(p.pid), group_ctxsw(p.pid) - sw0
    if rec:
        rec.send_signal(signal.SIGINT)
        rec.wait()
    user, kernel = u1 - u0, k1 - k0
    return {"cpu_us": (user + kernel) / done * 1e6, "user_us": user / done * 1e6,
            "kernel_us": kernel / done * 1e6, "ctxsw": sw / done, "req_s": done / wall}


def perf_split(path):
    """CPU 0's samples by thread name (numbered pool threads summed) and object."""
    out = subprocess.run(["perf", "report", "-i", path, "--no-children", "--sort",
                          "comm,dso", "--stdio", "-g", "none"], capture_output=True,
                         text=True).stdout
    split = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].endswith("%") and not line.startswith("#"):
            comm = parts[1].rstrip("0123456789").rstrip("-") or parts[1]
            key = f"{comm} {parts[2]}"
            split[key] = split.get(key, 0.0) + float(parts[0][:-1])
    return dict(sorted(split.items(), key=lambda kv: -kv[1]))


def callgrind_per_miss(binary, size, n1, n2, origin_port):
    """User-space instructions per miss, all threads, under callgrind (see --callgrind)."""
    work = tempfile.mkdtemp(prefix="fillcg-")
    port = free_port()
    cmd = hit_cost.edgecache_config(work, port, origin_port, False)
    cmd[0] = binary
    try:
        ir, _ = callgrind_ir(cmd, port, work, lambda: misses(port, "4k", 200),
                             lambda n: misses(port, size, n), n1, n2, 1, 180,
                             all_threads=True)
        return ir
    finally:
        shutil.rmtree(work, ignore_errors=True)


def median_span(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2], xs[0], xs[-1]


def cpu_main(a, servers, origin_port):
    os.sched_setaffinity(0, {1})  # edgeload inherits it
    if a.perf:
        os.makedirs(a.perf, exist_ok=True)
    results = {}
    for size in a.sizes.split(","):
        n = a.requests // 10 if size.endswith(("m", "g")) else a.requests
        for rnd in range(a.rounds):
            for name, binary in servers:
                work = tempfile.mkdtemp(prefix=f"fillcpu-{name}-")
                perf_out = (os.path.join(a.perf, f"{name}-{size}.data")
                            if a.perf and rnd == 0 else None)
                p, port = start(name, binary, work, origin_port)
                try:
                    r = cpu_per_miss(p, port, size, n, perf_out)
                finally:
                    stop(p)
                    shutil.rmtree(work, ignore_errors=True)
                results.setdefault(size, {}).setdefault(name, []).append(r)
                print(size, name, f"round {rnd + 1}:",
                      {k: round(v, 2) for k, v in r.items()}, flush=True)
                if perf_out:
                    for k, v in list(perf_split(perf_out).items())[:8]:
                        print(f"    {v:6.2f}%  {k}")
    print("\n| size | server | CPU us/miss | user us | kernel us | context switches/miss "
          "| req/s |")
    print("|---|---|---|---|---|---|---|")
    for size, rs in results.items():
        for name, runs in rs.items():
            cols = []
            for k, fmt in (("cpu_us", "{:.0f}"), ("user_us", "{:.0f}"), ("kernel_us", "{:.0f}"),
                           ("ctxsw", "{:.2f}"), ("req_s", "{:.0f}")):
                m, lo, hi = median_span([r[k] for r in runs])
                cols.append(f"{fmt.format(m)} ({fmt.format(lo)}-{fmt.format(hi)})")
            print(f"| {size} | {name} | " + " | ".join(cols) + " |")
    # Paired per round (the servers took turns): CPU per miss against nginx's, and the
    # kernel's share alone against nginx's whole (what no user-space change can go under).
    print("\n| size | server | CPU / nginx's | kernel alone / nginx's CPU | nginx's kernel "
          "/ its CPU |")
    print("|---|---|---|---|---|")
    for size, rs in results.items():
        ng = rs.get("nginx")
        if not ng:
            continue
        share = median_span([r["kernel_us"] / r["cpu_us"] for r in ng])
        for name, runs in rs.items():
            if name == "nginx":
                continue
            pairs = list(zip(runs, ng))
            cpu = median_span([r["cpu_us"] / n["cpu_us"] for r, n in pairs])
            kern = median_span([r["kernel_us"] / n["cpu_us"] for r, n in pairs])
            print(f"| {size} | {name} | " + " | ".join(
                f"{m:.2f} ({lo:.2f}-{hi:.2f})" for m, lo, hi in (cpu, kern, share)) + " |")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4k,100k,10m")
    ap.add_argument("--requests", type=int, default=3000,
                    help="misses per measurement (a tenth of it for sizes over 1 MiB)")
    ap.add_argument("--edgecache", default=f"edgecache={os.path.join(BIN, 'edgecache')}",
                    help="NAME=BINARY[,NAME=BINARY...]")
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument("--cpu", action="store_true",
                    help="CPU time and context switches per miss instead of syscalls")
    ap.add_argument("--rounds", type=int, default=3, help="--cpu: turns of every server")
    ap.add_argument("--perf", help="--cpu: perf record the first round into this directory")
    ap.add_argument("--callgrind", action="store_true",
                    help="user-space instructions per miss (edgecache binaries only)")
    ap.add_argument("--n1", type=int, default=500, help="--callgrind: the shorter run")
    ap.add_argument("--n2", type=int, default=2500, help="--callgrind: the longer run")
    ap.add_argument("--perf-stat", action="store_true",
                    help="count syscalls with perf's tracepoints instead of strace (root; "
                         "the server is not stopped at each call)")
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
        if a.callgrind:
            results = {}
            for size in a.sizes.split(","):
                for name, binary in servers:
                    if binary is None:
                        continue  # nginx: its workers are other processes
                    ir = callgrind_per_miss(binary, size, a.n1, a.n2, origin_port)
                    results.setdefault(size, {})[name] = round(ir)
                    print(size, name, f"{ir:.0f} instructions per miss", flush=True)
            if a.out:
                with open(a.out, "w") as f:
                    json.dump({"n1": a.n1, "n2": a.n2, "callgrind": results}, f, indent=1)
            return 0
        if a.cpu:
            results = cpu_main(a, servers, origin_port)
            if a.out:
                with open(a.out, "w") as f:
                    json.dump({"requests": a.requests, "cpu": results}, f, indent=1)
            return 0
        for size in a.sizes.split(","):
            n = a.requests // 10 if size.endswith(("m", "g")) else a.requests
            for name, binary in servers:
                work = tempfile.mkdtemp(prefix=f"fillcost-{name}-")
                p, port = start(name, binary, work, origin_port)
                switches = None
                try:
                    if a.perf_stat:
                        per, share, switches = perf_stat_per_miss(p, port, size, n, work,
                                                                  origin_port)
                    else:
                        per, share = strace_per_miss(p, port, size, n, work, origin_port)
                finally:
                    stop(p)
                    shutil.rmtree(work, ignore_errors=True)
                r = {
                    "origin_fetches_per_request": round(share, 3),
                    "syscalls": {k: round(v, 3) for k, v in sorted(per.items())},
                    "syscalls_total": round(sum(per.values()), 2),
                }
                if switches is not None:
                    r["context_switches"] = round(switches, 3)
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
