#!/usr/bin/env python3
"""Cost of routing a cache hit through many sites: user-space instructions (callgrind)
per 1 KiB RAM-tier hit, with 1,000 server names against today's single location, same
binary, same request.

Usage (valgrind installed, binaries built with `cargo build --release`):

    python3 bench/sites-cost.py [--out docs/results/sites-cost.json]

Configs (one edgecache worker each, access log off, keep-alive, RAM tier):
- `one`: one top-level `prefix = "/"` location, the default cache key (today's hit).
- `sites-*`: 1,000 server names: 500 exact, 400 wildcard (200 `*.lead`, 200
  `trail.*`), 100 regex (`~^rN-(\\d+)\\.regex\\.example$`), 997 servers of one name
  each and, last, the matched server with the last name of each kind. The matched
  server has a `prefix = "/"` location and 50 regex locations; the request takes the
  50th (`^/obj/(?<size>[0-9]+k)/`, named capture), whose cache key is the default key
  with `cache_key_args = { sort = true, include = ["a", "b"] }` and which has two
  `proxy_set_header`s (issue 26's bound; `--key template` instead keys on the template
  `$scheme://$host$uri?a=$arg_a&b=$arg_b`, without the headers, as measured before
  `cache_key_args` existed). `sites-exact`, `sites-wild` and `sites-regex` send a
  Host matching the exact, the `*.lead` and the regex name (the 100th regex name);
  the case and the port of the Host vary from the name.

Every config gets the same target, `/obj/1k/1?b=2&a=1&utm_source=x`.

Method (as bench/hit-cost.py): the server under `valgrind --tool=callgrind
--separate-threads=yes`, warmed until `X-Cache-Status: HIT` plus 500 requests; then
zero the counters, send N1 requests on one keep-alive connection (edgeload), dump;
zero, send N2, dump. The busiest thread's (Ir(N2) - Ir(N1)) / (N2 - N1) is one hit
with the fixed costs cancelled. `--reps` times, median kept. Callgrind counts
instructions, not time: the ratio is stable across machines of one architecture.
"""

import argparse
import json
import tempfile
import time
import urllib.request

from benchlib import (add_callgrind_args, callgrind_ir, checked_edgecache, edgeload_requests,
                      free_port, spawn_origin, wait_port, CACHED_LOCATION, cost_node_toml,
                      listen_toml)

TARGET = "/obj/1k/1?b=2&a=1&utm_source=x"
HOSTS = {
    "one": "127.0.0.1",
    "sites-exact": "Matched.Exact.Example:8080",
    "sites-wild": "www.Matched.Wild.Example",
    "sites-regex": "R99-42.regex.example.",
}


def base(dir, port, origin):
    return cost_node_toml(dir, origin, listen_toml(port))


LOC = CACHED_LOCATION


def sites_config(key):
    names = ([f"s{i}.exact.example" for i in range(499)]
             + [f"*.w{i}.wild.example" for i in range(200)]
             + [f"t{i}.trail.*" for i in range(199)]
             + [f"~^r{i}-(\\d+)\\.regex\\.example$" for i in range(99)])
    assert len(names) == 997
    out = []
    for n in names:
        out.append(f"[[server]]\nnames = ['{n}']\n[[server.location]]\nprefix = \"/\"\n{LOC}")
    # The matched server: the 500th exact, the 400th wildcard, the 100th regex name.
    out.append("[[server]]\nnames = ['matched.exact.example', '*.matched.wild.example', "
               "'~^r99-(\\d+)\\.regex\\.example$']\n"
               f"[[server.location]]\nprefix = \"/\"\n{LOC}")
    for i in range(49):
        out.append(f"[[server.location]]\nregex = '^/r{i}/([0-9]+)$'\n{LOC}")
    last = "[[server.location]]\nregex = '^/obj/(?<size>[0-9]+k)/'\n" + LOC
    if key == "template":
        last += 'cache_key = "$scheme://$host$uri?a=$arg_a&b=$arg_b"\n'
    else:
        last += ('cache_key_args = { sort = true, include = ["a", "b"] }\n'
                 'proxy_set_header = { Host = "origin.example", "X-Real-IP" = "$remote_addr" }\n')
    out.append(last)
    return "\n".join(out)


def config(name, dir, port, origin, key):
    text = base(dir, port, origin)
    if name == "one":
        text += f'[[location]]\nprefix = "/"\n{LOC}'
    else:
        text += sites_config(key)
    return checked_edgecache(dir, text)


def get(port, host):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{TARGET}", headers={"Host": host})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, dict(r.headers), r.read()


def load(port, host, requests):
    return edgeload_requests(f"http://127.0.0.1:{port}{TARGET}", requests,
                             extra=("-H", f"Host: {host}"))


def load_all(port, host, requests):
    """`load`, asserting that every request was answered."""
    done = load(port, host, requests)
    assert done == requests, (done, requests)


def warm(port, host):
    for _ in range(100):
        st, h, body = get(port, host)
        if st == 200 and h.get("X-Cache-Status") == "HIT":
            assert len(body) == 1024, len(body)
            break
        time.sleep(0.05)
    else:
        raise SystemExit(f"no HIT for Host {host}")
    for _ in range(5):
        get(port, host)
    load(port, host, 500)


def main():
    ap = argparse.ArgumentParser()
    add_callgrind_args(ap, reps=3)
    ap.add_argument("--configs", default=",".join(HOSTS))
    ap.add_argument("--keep", action="store_true",
                    help="keep the callgrind files (for callgrind_annotate)")
    ap.add_argument("--key", choices=["args", "template"], default="args",
                    help="the matched location's key: cache_key_args with two "
                         "proxy_set_header (issue 26's bound), or the template it replaces")
    ap.add_argument("--out")
    a = ap.parse_args()
    origin_port = free_port()
    origin = spawn_origin(origin_port)
    results = {}
    try:
        wait_port(origin_port, timeout=60)
        for name in a.configs.split(","):
            work = tempfile.mkdtemp(prefix=f"sitescost-{name}-")
            port = free_port()
            cmd = config(name, work, port, origin_port, a.key)
            host = HOSTS[name]
            med, all_ = callgrind_ir(cmd, port, work, lambda: warm(port, host),
                                     lambda n: load_all(port, host, n),
                                     a.n1, a.n2, a.reps, start_timeout=180)
            results[name] = {"host": HOSTS[name], "ir_per_hit": round(med),
                             "ir_samples": [round(x) for x in all_]}
            if a.keep:
                results[name]["callgrind_dir"] = work
            print(name, json.dumps(results[name]), flush=True)
    finally:
        origin.kill()
    if "one" in results:
        b = results["one"]["ir_per_hit"]
        for r in results.values():
            r["vs_one"] = round(r["ir_per_hit"] / b, 3)
    print("\n| config | Host | Ir per 1 KiB hit | vs one location |")
    print("|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | `{r['host']}` | {r['ir_per_hit']} | {r.get('vs_one', '')} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"target": TARGET, "n1": a.n1, "n2": a.n2, "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
