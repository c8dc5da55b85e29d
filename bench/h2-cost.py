#!/usr/bin/env python3
"""Cost of one small cache hit over HTTP/2 (and HTTP/1.1) for two builds side by side:
user-space instructions per request (callgrind), and where they go, by crate.

Usage (valgrind, h2load and openssl installed; both builds' release binaries):

    python3 bench/h2-cost.py [--old /tmp/base] [--new target/release] [--size 1k]
                             [--h1] [--ktls] [--out docs/results/h2-cost.json]

What it does, per build (old, then new; one worker, RAM tier on, access log off):
1. Start the origin (the new build's edgeorigin), then edgecache under
   `valgrind --tool=callgrind --separate-threads=yes` with a TLS listener offering h2
   (an ECDSA P-256 certificate made with the openssl CLI; `--ktls`: kernel TLS when the
   kernel has it, else rustls does the crypto in user space as without it); warm the
   object until it is a RAM hit.
2. HTTP/2: zero the counters, `h2load -n N1 -c1 -m1` (one connection, one stream at a
   time, a new connection per run), dump; zero, `-n N2`, dump. The busiest thread's
   (Ir(N2) - Ir(N1)) / (N2 - N1) is one request's cost with the fixed ones (the TLS
   handshake, the dump) cancelled out. `--reps` times, median kept.
3. The same difference per crate (self cost of each function, callgrind_annotate,
   grouped by the crate its symbol names: h2, rustls, the crypto provider, tokio, ours,
   libc's memcpy/malloc...): what the rest of the instructions are.
4. `--h1`: the HTTP/1.1 hit over plain TCP (edgeload, 1 connection), the same way.

Deterministic enough to compare: callgrind counts instructions, not time.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (BIN, add_callgrind_args, callgrind_ir, edgeload_requests,  # noqa: E402
                      free_port, spawn_origin, wait_port, CACHED_LOCATION, cost_node_toml,
                      listen_toml)
from tls import make_certs  # noqa: E402



def h2load(port, path, n):
    """`n` requests on one HTTP/2 connection, one stream at a time; the count done."""
    r = subprocess.run(["h2load", "-n", str(n), "-c1", "-m1", "-t1",
                        f"https://127.0.0.1:{port}{path}"],
                       capture_output=True, text=True, timeout=900)
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", r.stdout)
    if not m or int(m.group(2)) != n:
        raise SystemExit(f"h2load did not finish {n} requests:\n{r.stdout[-1500:]}\n{r.stderr}")
    if "h2" not in r.stdout.split("Application protocol:")[-1][:20]:
        raise SystemExit(f"h2load did not negotiate h2:\n{r.stdout[-800:]}")
    return n


def h1load(port, path, n):
    return edgeload_requests(f"http://127.0.0.1:{port}{path}", n, 1, "300s")


def category(fn):
    """The crate (or library) a function's symbol belongs to."""
    f = fn
    # A value's drop, a trait's method: the crate of the type.
    for wrap in ("core::ptr::drop_in_place<", "<"):
        while f.startswith(wrap):
            f = f[len(wrap):]
    f = re.sub(r"^[&*( ]*(dyn |impl |mut )?", "", f)
    for prefix, cat in (("h2::", "h2"), ("hpack", "h2"), ("rustls::", "rustls"),
                        ("tokio_rustls::", "rustls"), ("ring::", "crypto"),
                        ("ring_core", "crypto"), ("aws_lc", "crypto"),
                        ("tokio::", "tokio"), ("http::", "http crate"),
                        ("bytes::", "bytes"), ("edge_core::", "edge-core"),
                        ("edge_http::", "edge-http"), ("edge_cache::", "edge-cache"),
                        ("edge_aio::", "edge-aio"), ("edgecache::", "edge-core"),
                        ("core::", "core/alloc/std"), ("alloc::", "core/alloc/std"),
                        ("std::", "core/alloc/std"), ("hashbrown::", "core/alloc/std"),
                        ("indexmap::", "http crate")):
        if f.startswith(prefix):
            return cat
    if re.match(r"(__)?(mem(cpy|move|set|cmp)|str|bcmp)", f) or "memcpy" in f or "memmove" in f:
        return "libc mem*"
    if re.search(r"malloc|free|realloc|calloc|_int_|tcache", f):
        return "malloc"
    if re.match(r"(gcm_|aes_|ecp_|chacha|poly1305|sha|p256|GFp|bn_|x25519|CRYPTO|OPENSSL)", f,
                re.I):
        return "crypto"
    return "other"


def split_file_fn(rest):
    """`file:function [object]` -> function (a symbol's `::` is not the separator)."""
    for i, c in enumerate(rest):
        if c == ":" and rest[i + 1:i + 2] != ":" and (i == 0 or rest[i - 1] != ":"):
            return re.sub(r"\s*\[[^\]]*\]\s*$", "", rest[i + 1:].strip())
    return None


def self_by_function(path):
    """Self cost of each function in one callgrind dump, read from the file itself (the
    cost lines under each `fn=`, not the inclusive costs that follow a `calls=` line)."""
    names, out, cur, call_cost = {}, {}, None, False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("fn="):
                m = re.match(r"fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if m:
                    if m.group(2):
                        names[m.group(1)] = m.group(2)
                    cur = names.get(m.group(1))
                else:
                    cur = line[3:].strip()
            elif line.startswith("cfn="):
                # A called function's name is defined here as often as under fn=.
                m = re.match(r"cfn=\((\d+)\) (.*)", line.rstrip("\n"))
                if m:
                    names[m.group(1)] = m.group(2)
            elif line.startswith("calls="):
                call_cost = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if call_cost:
                    call_cost = False
                    continue
                parts = line.split()
                if cur and len(parts) >= 2:
                    out[cur] = out.get(cur, 0) + int(parts[1])
    return out


def self_costs(path):
    """Self cost per category of one callgrind dump."""
    out = {}
    for fn, ir in self_by_function(path).items():
        cat = category(fn)
        out[cat] = out.get(cat, 0) + ir
    return out


def busiest_file(work, tag, thread=None):
    """The dump carrying `tag` of the busiest thread (or of `thread`, its `-NN` suffix)."""
    best, best_ir = None, -1
    for name in os.listdir(work):
        if not name.startswith("cg.out."):
            continue
        if thread is not None and not name.endswith(thread):
            continue
        p = os.path.join(work, name)
        with open(p, errors="replace") as f:
            text = f.read()
        if tag not in text[:4000]:
            continue
        m = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
        if m and int(m.group(1)) > best_ir:
            best, best_ir = p, int(m.group(1))
    return best


def breakdown(work, n1, n2):
    """Per-request self cost by category, from the first repetition's two dumps."""
    # The n1 dump of the thread busiest in the n2 one (as callgrind_ir does).
    b = busiest_file(work, f"r0n{n2}")
    a = b and busiest_file(work, f"r0n{n1}", "-" + b.rsplit("-", 1)[-1])
    if not a or not b:
        return {}
    ca, cb = self_costs(a), self_costs(b)
    per = {k: (cb.get(k, 0) - ca.get(k, 0)) / (n2 - n1) for k in set(ca) | set(cb)}
    return {k: round(v) for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if abs(v) >= 50}


def measure(bin_dir, origin_port, certs, proto, a):
    work = tempfile.mkdtemp(prefix=f"h2cost-{proto}-")
    port, tls_port = free_port(), free_port()
    cfg = os.path.join(work, "edgecache.toml")
    with open(cfg, "w") as f:
        ktls = "true" if a.ktls else "false"
        listen = (f'[[listen]]\naddr = "127.0.0.1:{tls_port}"\n'
                  f'tls = {{ cert = "{certs["cert"]}", key = "{certs["key"]}", ktls = {ktls} }}\n'
                  'http2 = true\n' + listen_toml(port))
        f.write(cost_node_toml(work, origin_port, listen)
                + '[[location]]\nprefix = "/"\n' + CACHED_LOCATION)
    cmd = [os.path.join(bin_dir, "edgecache"), "-c", cfg]
    path = f"/obj/{a.size}/1"
    if proto == "h2":
        load = lambda n: h2load(tls_port, path, n)  # noqa: E731
        warm_port = tls_port
    else:
        load = lambda n: h1load(port, path, n)  # noqa: E731
        warm_port = port

    def warm():
        wait_port(warm_port, 120)
        # A miss, a disk hit (admitted to RAM), then RAM hits.
        for _ in range(3):
            load(1) if proto == "h2" else h1load(port, path, 1)
        load(200)

    med, all_ = callgrind_ir(cmd, port, work, warm, load, a.n1, a.n2, a.reps,
                             start_timeout=120)
    res = {"ir_per_request": round(med), "ir_samples": [round(x) for x in all_],
           "by_crate": breakdown(work, a.n1, a.n2)}
    if a.keep:
        res["work"] = work
    else:
        shutil.rmtree(work, ignore_errors=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", default="/tmp/base",
                    help="the old build's directory; an empty string measures --new alone")
    ap.add_argument("--new", default=BIN)
    ap.add_argument("--size", default="1k")
    ap.add_argument("--h1", action="store_true", help="also HTTP/1.1 over plain TCP")
    ap.add_argument("--ktls", action="store_true")
    ap.add_argument("--only", choices=["h2", "h1"], help="one protocol only")
    ap.add_argument("--keep", action="store_true",
                    help="keep the callgrind dumps (their directories are printed)")
    ap.add_argument("--out")
    add_callgrind_args(ap, reps=3)
    a = ap.parse_args()
    for tool in ("valgrind", "callgrind_annotate", "h2load", "openssl"):
        if not shutil.which(tool):
            raise SystemExit(f"h2-cost.py needs {tool}")
    certdir = tempfile.mkdtemp(prefix="h2cost-certs-")
    shutil.rmtree(certdir)
    certs = make_certs(certdir)
    origin_port = free_port()
    origin = spawn_origin(origin_port)
    results = {}
    try:
        wait_port(origin_port, 60)
        protos = [a.only] if a.only else (["h2", "h1"] if a.h1 else ["h2"])
        for proto in protos:
            builds = [("old", a.old)] if a.old else []
            for build, d in builds + [("new", a.new)]:
                d = os.path.abspath(d)
                r = measure(d, origin_port, certs, proto, a)
                results[f"{proto}-{build}"] = r
                print(proto, build, json.dumps(r), flush=True)
    finally:
        origin.kill()
        shutil.rmtree(certdir, ignore_errors=True)
    print("\n| cell | old Ir/request | new Ir/request | new/old |")
    print("|---|---|---|---|")
    for proto in ("h2", "h1"):
        o, n = results.get(f"{proto}-old"), results.get(f"{proto}-new")
        if o and n:
            print(f"| {proto} {a.size} RAM hit | {o['ir_per_request']} {o['ir_samples']} | "
                  f"{n['ir_per_request']} {n['ir_samples']} | "
                  f"{n['ir_per_request'] / o['ir_per_request']:.3f} |")
    for proto in ("h2", "h1"):
        o, n = results.get(f"{proto}-old"), results.get(f"{proto}-new")
        if o and n:
            print(f"\n{proto}: self cost per request by crate (first repetition)")
            print("| crate | old | new |")
            print("|---|---|---|")
            for k in sorted(set(o["by_crate"]) | set(n["by_crate"]),
                            key=lambda k: -max(o["by_crate"].get(k, 0), n["by_crate"].get(k, 0))):
                print(f"| {k} | {o['by_crate'].get(k, 0)} | {n['by_crate'].get(k, 0)} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"size": a.size, "ktls": a.ktls, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
