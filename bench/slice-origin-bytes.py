#!/usr/bin/env python3
"""Origin bytes per client byte for seeking clients, `slice` against whole-object
caching: each client picks one of 4 objects and a random (seeded) offset, then reads
4 MiB in 1 MiB ranges, as a player seeking does. docs/results/slice-origin-bytes.md was
measured with it.

Usage: python3 bench/slice-origin-bytes.py [--bin target/release] [--reps 3]

Per repetition and configuration: a fresh edgeorigin and edgecache (one worker, a fresh
cache directory), 8 clients one after the other (no overlap, so every read is a miss),
then origin bytes (edgeorigin's /stats) over client body bytes, and the bytes the cache
directory holds. Unsliced objects are 256 MiB (a Range miss pulls the whole object: at
2 GiB a repetition would take minutes); sliced ones are 2 GiB. Byte counts do not
depend on the machine's speed, so a debug build gives the same numbers.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
import urllib.request

import importlib.util

_spec = importlib.util.spec_from_file_location(
    "benchlib", os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchlib.py")
)
benchlib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(benchlib)

MIB = 1 << 20


def config(port, admin, origin, cache, extra):
    return f"""workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "127.0.0.1:{port}"
[[cache]]
name = "c1"
path = "{cache}"
[[upstream]]
name = "origin"
servers = ["127.0.0.1:{origin}"]
[[location]]
prefix = "/"
proxy = "origin"
cache = ["c1"]
{extra}
[admin]
listen = "127.0.0.1:{admin}"
"""


def origin_bytes(port):
    return json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats"))["bytes"]


def ranged(port, path, a, b):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Range": f"bytes={a}-{b}"}
    )
    body = urllib.request.urlopen(req, timeout=600).read()
    assert len(body) == b - a + 1, (path, a, b, len(body))
    return len(body)


def run(bindir, extra, size, size_name, seed, clients=8):
    d = tempfile.mkdtemp(prefix="slice-bytes-")
    o, p, a = benchlib.free_port(), benchlib.free_port(), benchlib.free_port()
    op = subprocess.Popen(
        [f"{bindir}/edgeorigin", "--listen", f"127.0.0.1:{o}"], stderr=subprocess.DEVNULL
    )
    with open(f"{d}/e.toml", "w") as f:
        f.write(config(p, a, o, f"{d}/cache", extra))
    ep = subprocess.Popen([f"{bindir}/edgecache", "-c", f"{d}/e.toml"], stderr=subprocess.DEVNULL)
    try:
        benchlib.wait_port(o)
        benchlib.wait_port(p)
        rnd = random.Random(seed)
        before, got = origin_bytes(o), 0
        for _ in range(clients):
            path = f"/obj/{size_name}/{rnd.randrange(4)}"
            off = rnd.randrange(size - 4 * MIB)
            for i in range(4):
                got += ranged(p, path, off + i * MIB, off + (i + 1) * MIB - 1)
        origin = origin_bytes(o) - before
    finally:
        ep.terminate()
        op.terminate()
        ep.wait()
        op.wait()
    disk = sum(
        os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(f"{d}/cache") for f in fs
    )
    shutil.rmtree(d, ignore_errors=True)
    return origin / got, disk


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    cases = [
        ("unsliced, 256 MiB objects", "", 1 << 28, "256m"),
        ('slice = "1m", 2 GiB objects', 'slice = "1m"', 1 << 31, "2g"),
        ('slice = "256k", 2 GiB objects', 'slice = "256k"', 1 << 31, "2g"),
    ]
    for name, extra, size, size_name in cases:
        rows = [run(args.bin, extra, size, size_name, seed) for seed in range(args.reps)]
        ratios = [r for r, _ in rows]
        disks = [dk / MIB for _, dk in rows]
        print(
            f"{name}: origin/client bytes {min(ratios):.4f}..{max(ratios):.4f}, "
            f"disk {min(disks):.1f}..{max(disks):.1f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
