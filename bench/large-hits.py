#!/usr/bin/env python3
"""CPU per request of large cache hits, and what the kernel does for them: edgecache
builds (and variants of their [aio] table) against nginx proxy_cache, in alternating
rounds (A B C A B C ...), the server pinned to CPU 0, edgeload (one thread, 16 keep-alive
connections) and edgeorigin on CPU 1. docs/results/large-hits.md was measured with it.

Usage (nginx installed; root for --counters, which uses perf's tracepoints):

    python3 bench/large-hits.py [--size 1m|mix|400k...] [--requests 5000] [--rounds 5]
        [--build NAME=BINDIR[:KEY=VALUE,...]]... [--no-nginx] [--counters] [--out F.json]

`--build` names an edgecache binary's directory; after a colon, `[aio]` keys for its
config (`--build new=target/release --build new-sendfile=target/release:sendfile_max=off`).
Default: one build, target/release. `--size mix` is the `hits` experiment's 10K/100K/1M
mix (equal shares).

Per round and server: start it on a fresh cache (no RAM tier, access log off, one
worker), fetch every object (100 per size) three times in order (the fill, then hits),
send a quarter of `--requests` as warm-up, then `--requests` requests spread over the
objects. CPU per request = the server process's utime + stime (`/proc/PID/stat`, every
thread) over those requests, divided by them. `--counters` adds, in the first round,
`perf stat` on the server: syscalls and hrtimer starts per request (under BBR on
loopback nearly every hrtimer start of a large hit is a TCP pacing timer,
`tcp_pace_kick`). The machine may be shared: compare servers within a run, and read the
min-max spread.
"""

import argparse
import importlib.util
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

from benchlib import BIN, ROOT, PerfStat, free_port, wait_port

_spec = importlib.util.spec_from_file_location("hit_cost", os.path.join(ROOT, "bench", "hit-cost.py"))
hit_cost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hit_cost)

TICK = os.sysconf("SC_CLK_TCK")
MIX = ("10k", "100k", "1m")
COUNTERS = ["raw_syscalls:sys_enter", "timer:hrtimer_start", "irq:softirq_entry"] + [
    f"syscalls:sys_enter_{c}" for c in
    ("sendfile64", "sendto", "writev", "preadv2", "pread64", "mincore", "recvfrom", "epoll_wait")]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def edgeload(args, capture=True):
    cmd = ["taskset", "-c", "1", os.path.join(BIN, "edgeload"), "-t", "1", "-T", "60s"] + args
    return subprocess.run(cmd, capture_output=capture, text=True, check=True).stdout


def load(port, size, n, work):
    if size == "mix":
        mix = os.path.join(work, "mix.txt")
        with open(mix, "w") as f:
            f.writelines(f"1 http://127.0.0.1:{port}/obj/{s}\n" for s in MIX)
        target = ["--mix", mix, f"http://127.0.0.1:{port}/obj/1m"]
    else:
        target = [f"http://127.0.0.1:{port}/obj/{size}"]
    t0 = time.time()
    out = edgeload(["-c", "16", "--requests", str(n), "--paths", "100"] + target)
    elapsed = time.time() - t0
    m = re.search(r"(\d+) requests in", out)
    if not m or "Non-2xx" in out:
        raise SystemExit(f"load failed:\n{out}")
    return int(m.group(1)), elapsed


def server_cmd(spec, work, port, origin):
    if spec["kind"] == "nginx":
        return hit_cost.nginx_config(work, port, origin)
    cmd = hit_cost.edgecache_config(work, port, origin, memory=False)
    cmd[0] = os.path.join(spec["dir"], "edgecache")
    if spec["aio"]:
        with open(cmd[2], "a") as f:
            f.write("\n[aio]\n" + "".join(f'{k} = "{v}"\n' for k, v in spec["aio"].items()))
    return cmd


def one_round(spec, a, origin, counters):
    work = tempfile.mkdtemp(prefix=f"large-hits-{spec['name']}-")
    port = free_port()
    cmd = server_cmd(spec, work, port, origin)
    p = subprocess.Popen(["taskset", "-c", "0"] + cmd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, cwd=work, start_new_session=True)
    try:
        wait_port(port, timeout=60)
        for _ in range(3):
            for s in (MIX if a.size == "mix" else (a.size,)):
                edgeload(["-c", "1", "--requests", "100", "--paths", "100", "--sequential",
                          f"http://127.0.0.1:{port}/obj/{s}"])
        load(port, a.size, max(a.requests // 4, 1), work)
        stat = (PerfStat(COUNTERS, ["-p", str(p.pid)], os.path.join(work, "perf-stat.txt"))
                if counters else None)
        c0 = cpu_seconds(p.pid)
        n, elapsed = load(port, a.size, a.requests, work)
        cpu = cpu_seconds(p.pid) - c0
        res = {"cpu_us_per_req": cpu / n * 1e6, "rps": n / elapsed}
        if stat:
            res["per_request"] = {k: round(v / n, 3) for k, v in stat.stop().items()}
        return res
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        shutil.rmtree(work, ignore_errors=True)


def parse_build(text):
    name, _, rest = text.partition("=")
    directory, _, keys = rest.partition(":")
    aio = dict(kv.split("=", 1) for kv in keys.split(",") if kv)
    # Absolute: each server runs in its own work directory.
    return {"name": name, "kind": "edgecache", "dir": os.path.abspath(directory or BIN),
            "aio": aio}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="1m")
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--build", action="append", default=[])
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument("--counters", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    specs = [parse_build(b) for b in a.build] or [parse_build(f"edgecache={BIN}")]
    if not a.no_nginx:
        if shutil.which("nginx"):
            specs.append({"name": "nginx", "kind": "nginx"})
        else:
            print("nginx not installed (bench/peers/install.sh): left out", file=sys.stderr)
    origin_port = free_port()
    origin = subprocess.Popen(["taskset", "-c", "1", os.path.join(BIN, "edgeorigin"), "--listen",
                               f"127.0.0.1:{origin_port}", "--count", "100"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {s["name"]: [] for s in specs}
    try:
        wait_port(origin_port, timeout=60)
        for r in range(a.rounds):
            for s in specs:
                res = one_round(s, a, origin_port, a.counters and r == 0)
                results[s["name"]].append(res)
                print(f"round {r} {s['name']}: {res['cpu_us_per_req']:.1f} us/req, "
                      f"{res['rps']:.0f} req/s {json.dumps(res.get('per_request', {}))}", flush=True)
    finally:
        origin.kill()
    base = results.get("nginx")
    print(f"\n{a.size}, {a.requests} requests x {a.rounds} rounds; median (min-max)\n")
    print("| server | CPU us/request | req/s | CPU vs nginx (per round) |")
    print("|---|---|---|---|")
    for name, rs in results.items():
        cpu = [x["cpu_us_per_req"] for x in rs]
        rps = [x["rps"] for x in rs]
        vs = ""
        if base:
            ratio = [x / y["cpu_us_per_req"] for x, y in zip(cpu, base)]
            vs = f"{statistics.median(ratio):.2f}x ({min(ratio):.2f}-{max(ratio):.2f})"
        print(f"| {name} | {statistics.median(cpu):.0f} ({min(cpu):.0f}-{max(cpu):.0f}) | "
              f"{statistics.median(rps):.0f} ({min(rps):.0f}-{max(rps):.0f}) | {vs} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"size": a.size, "requests": a.requests, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
