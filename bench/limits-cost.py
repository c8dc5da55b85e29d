#!/usr/bin/env python3
"""Cost of limit_req and limit_conn per request: user-space instructions (callgrind) of
a 1 KiB RAM-tier hit without limits, with limits that let it through, and of a request
refused by limit_req; same binary, same request.

Usage (valgrind installed, binaries built with `cargo build --release`):

    python3 bench/limits-cost.py [--out docs/results/limits-cost.json]

Configs (one edgecache worker each, access log off, keep-alive, RAM tier, one
top-level `prefix = "/"` cached location; the request is `GET /obj/1k/1`):
- `hit`: no limits (today's hit).
- `limit_req`: one `limit_req` zone keyed by `$binary_remote_addr`, at a rate the load
  never reaches (1,000,000 r/s, burst 1,000,000, nodelay): every request passes and
  updates the key's state.
- `limit_req+conn`: the same plus a location `limit_conn` (max 1000) on a zone keyed
  by `$binary_remote_addr`: the connection's count is checked on every request.
- `rejected`: `limit_req` at 1 r/min, burst 0: after the first request every one is
  refused with 429 (keep-alive kept), so the loop measures a refusal.
- `return`: no cache, no limits: a location answering `return = { status = 204 }`,
  the floor of any answered request (read, parse, route, write) for comparison.

Method (as bench/hit-cost.py): the server under `valgrind --tool=callgrind
--separate-threads=yes`, warmed (a HIT, plus 500 requests); then zero the counters,
send N1 requests on one keep-alive connection (edgeload), dump; zero, send N2, dump.
The busiest thread's (Ir(N2) - Ir(N1)) / (N2 - N1) is one request with the fixed costs
cancelled. `--reps` times, median kept.
"""

import argparse
import json
import tempfile
import time
import urllib.error
import urllib.request

from benchlib import (add_callgrind_args, callgrind_ir, checked_edgecache, edgeload_requests,
                      free_port, spawn_origin, wait_port, CACHED_LOCATION, cost_node_toml,
                      listen_toml)

TARGET = "/obj/1k/1"

LIMITS = {
    "hit": ("", ""),
    "return": ("", ""),
    "limit_req": (
        '[[limit_req_zone]]\nname = "perip"\nkey = "$binary_remote_addr"\n'
        'rate = "1000000r/s"\nsize = "1m"\n',
        'limit_req = [{ zone = "perip", burst = 1000000, nodelay = true }]\n'),
    "limit_req+conn": (
        '[[limit_req_zone]]\nname = "perip"\nkey = "$binary_remote_addr"\n'
        'rate = "1000000r/s"\nsize = "1m"\n'
        '[[limit_conn_zone]]\nname = "addr"\nkey = "$binary_remote_addr"\nsize = "1m"\n',
        'limit_req = [{ zone = "perip", burst = 1000000, nodelay = true }]\n'
        'limit_conn = { zone = "addr", max = 1000 }\n'),
    "rejected": (
        '[[limit_req_zone]]\nname = "perip"\nkey = "$binary_remote_addr"\n'
        'rate = "1r/m"\nsize = "1m"\n',
        'limit_req = [{ zone = "perip" }]\n'),
}


def config(name, dir, port, origin):
    zones, loc = LIMITS[name]
    handler = 'return = { status = 204 }\n' if name == "return" else CACHED_LOCATION
    text = (cost_node_toml(dir, origin, listen_toml(port))
            + f'{zones}\n[[location]]\nprefix = "/"\n{handler}{loc}')
    return checked_edgecache(dir, text)


def get(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{TARGET}", timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def load(port, requests):
    done = edgeload_requests(f"http://127.0.0.1:{port}{TARGET}", requests)
    assert done == requests, (done, requests)


def warm(port, name):
    for _ in range(100):
        st, h, body = get(port)
        if name in ("rejected", "return"):
            if st == (429 if name == "rejected" else 204):
                break
        elif st == 200 and h.get("X-Cache-Status") == "HIT":
            assert len(body) == 1024, len(body)
            break
        time.sleep(0.05)
    else:
        raise SystemExit(f"{name}: never in the state to measure")
    load(port, 500)
    st, _, _ = get(port)
    assert st == {"rejected": 429, "return": 204}.get(name, 200), (name, st)


def main():
    ap = argparse.ArgumentParser()
    add_callgrind_args(ap, reps=3)
    ap.add_argument("--configs", default=",".join(LIMITS))
    ap.add_argument("--out")
    a = ap.parse_args()
    origin_port = free_port()
    origin = spawn_origin(origin_port)
    results = {}
    try:
        wait_port(origin_port, timeout=60)
        for name in a.configs.split(","):
            work = tempfile.mkdtemp(prefix=f"limitscost-{name}-")
            port = free_port()
            cmd = config(name, work, port, origin_port)
            med, all_ = callgrind_ir(cmd, port, work, lambda: warm(port, name),
                                     lambda n: load(port, n), a.n1, a.n2, a.reps,
                                     start_timeout=180)
            results[name] = {"ir_per_request": round(med),
                             "ir_samples": [round(x) for x in all_]}
            print(name, json.dumps(results[name]), flush=True)
    finally:
        origin.kill()
    if "hit" in results:
        b = results["hit"]["ir_per_request"]
        for r in results.values():
            r["vs_hit"] = round(r["ir_per_request"] / b, 3)
    print("\n| config | Ir per request | vs an unlimited 1 KiB hit |")
    print("|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['ir_per_request']} | {r.get('vs_hit', '')} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"target": TARGET, "n1": a.n1, "n2": a.n2, "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
