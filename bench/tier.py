#!/usr/bin/env python3
"""The tier experiment: one edge node in front of three parent caches (all edgecache,
loopback ports) sharded by consistent hashing, in front of edgeorigin; a Zipf workload;
a parent killed and restarted mid-run.

Usage: edgebench tier [--quick] [--duration 10s] [--out docs/results] [--keep], which runs
       python3 bench/tier.py [--seconds 10] [--rate 800] [--ids 2000] [--out docs/results]

(edgebench runs one server under test per cell; a topology of four nodes and a fault in
the middle of a run is this script's job.) Needs target/release/{edgecache,edgeorigin,
edgeload} (`cargo build --release -p edgecache -p edgeorigin -p edgeload`). Phases, each
`--seconds` long, the same open-loop Zipf(1.0) load over `--ids` 10 KiB objects:

  A. all three parents up (after a warm-up pass that requests every object once);
  B. parent p2 killed (SIGKILL) at the start: the edge's health checks (200 ms, 2 fails)
     take it out, its keys move to p1 and p3;
  C. p2 restarted on its cache directory: it passes 2 checks, its keys return.

Reported: origin requests per object for the whole tier, each parent's share of the
edge's requests, the errors and origin fetches of each phase, and what moved. Writes
`tier.md` to --out.
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

from benchlib import ROOT, BIN, free_port, wait_port, get_json



def origin_requests(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as r:
        return json.loads(r.read())["requests"]


class Node:
    def __init__(self, work, name, text):
        self.name = name
        self.port = free_port()
        self.admin = free_port()
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.cfg = os.path.join(self.dir, "edgecache.toml")
        with open(self.cfg, "w") as f:
            f.write(text.format(port=self.port, admin=self.admin, dir=self.dir, name=name))
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "edgecache"), "-c", self.cfg],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.dir, "stderr.log"), "a"),
            start_new_session=True)
        wait_port(self.port, timeout=15)
        wait_port(self.admin, timeout=15)

    def kill(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)

    def requests(self):
        return get_json(self.admin, "/status", timeout=5)["totals"]["requests"]


PARENT = '''workers = 1
worker_cpu_affinity = "off"
access_log = "off"
node_name = "{name}"
error_log = {{ path = "{dir}/error.log", level = "warn" }}
[[listen]]
addr = "127.0.0.1:{port}"
[admin]
listen = "127.0.0.1:{admin}"
[[cache]]
name = "c"
path = "{dir}/cache"
[[upstream]]
name = "origin"
servers = ["127.0.0.1:ORIGIN"]
[[location]]
exact = "/health"
return = {{ status = 200, body = "ok" }}
[[location]]
prefix = "/"
proxy = "origin"
cache = ["c"]
cache_valid = {{ "200" = "1h" }}
'''

EDGE = '''workers = 1
worker_cpu_affinity = "off"
access_log = "off"
node_name = "edge"
error_log = {{ path = "{dir}/error.log", level = "warn" }}
[[listen]]
addr = "127.0.0.1:{port}"
[admin]
listen = "127.0.0.1:{admin}"
[[upstream]]
name = "parents"
servers = [PARENTS]
balance = "consistent_hash"
max_fails = 1
fail_timeout = "2s"
connect_timeout = "300ms"
health_check = {{ path = "/health", interval = "200ms", timeout = "200ms", fails = 2, passes = 2 }}
[[location]]
prefix = "/"
proxy = "parents"
'''


def load(edge, seconds, rate, ids, work, tag):
    js = os.path.join(work, f"load-{tag}.json")
    subprocess.run(
        [os.path.join(BIN, "edgeload"), "-t", "1", "-c", "16", "-d", f"{seconds}s",
         "-R", str(rate), "--paths", str(ids), "--zipf", "1.0", "-T", "3s",
         "--json", js, f"http://127.0.0.1:{edge.port}/obj/10k"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    with open(js) as f:
        r = json.load(f)
    errors = sum(v for v in r["errors"].values() if isinstance(v, (int, float)))
    return r["requests"], errors, r["errors"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rate", type=int, default=800)
    ap.add_argument("--ids", type=int, default=2000)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results"))
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tier-")
    oport = free_port()
    origin = subprocess.Popen(
        [os.path.join(BIN, "edgeorigin"), "--listen", f"127.0.0.1:{oport}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_port(oport, timeout=15)
    nodes = []
    started = time.time()
    try:
        parents = [Node(work, f"p{i}", PARENT.replace("ORIGIN", str(oport))) for i in (1, 2, 3)]
        nodes += parents
        plist = ", ".join(f'"127.0.0.1:{p.port}"' for p in parents)
        edge = Node(work, "edge", EDGE.replace("PARENTS", plist))
        nodes.append(edge)
        # Warm-up: every object once, through the edge.
        for i in range(1, a.ids + 1):
            urllib.request.urlopen(f"http://127.0.0.1:{edge.port}/obj/10k/{i}", timeout=5).read()
        fills = origin_requests(oport)
        rows = []

        def phase(label, before_action=None):
            if before_action:
                before_action()
            o0 = origin_requests(oport)
            p0 = [p.requests() if p.proc.poll() is None else None for p in parents]
            reqs, errs, kinds = load(edge, a.seconds, a.rate, a.ids, work, label[0])
            o1 = origin_requests(oport)
            p1 = [p.requests() if p.proc.poll() is None else None for p in parents]
            served = [(b - x) if (b is not None and x is not None) else 0 for x, b in zip(p0, p1)]
            rows.append((label, reqs, errs, kinds, o1 - o0, served))

        phase("A: all three parents up")
        phase("B: p2 killed at the start", lambda: parents[1].kill())
        phase("C: p2 restarted on its cache", lambda: parents[1].start())
        total_origin = origin_requests(oport)
        status = get_json(edge.admin, "/status", timeout=5)
    finally:
        for n in nodes:
            n.stop()
        os.killpg(origin.pid, signal.SIGTERM)
        origin.wait()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "tier.md"), "w") as f:
        f.write("# A parent tier by consistent hashing: one edge, three parents\n\n")
        f.write(f"Produced by `edgebench tier`, which ran `python3 bench/tier.py --seconds {a.seconds} --rate {a.rate} "
                f"--ids {a.ids}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))} "
                "(2-vCPU VM; every process on loopback, unpinned).\n\n")
        f.write(__doc__.split("\n\n", 2)[2].split("\n\nReported")[0] + "\n\n")
        f.write("## Results\n\n")
        f.write(f"- **Origin requests per object for the whole tier: "
                f"{fills / a.ids:.3f}** after the warm-up pass ({fills} fetches for {a.ids} "
                f"objects), {total_origin / a.ids:.3f} at the end of the run, the kill "
                "included.\n")
        share = rows[0][5]
        tot = sum(share) or 1
        f.write("- **Key spread** (phase A, each parent's share of the edge's requests): "
                + ", ".join(f"p{i + 1} {100 * s / tot:.1f}%" for i, s in enumerate(share))
                + " (Zipf: the hottest keys weigh; over the keys themselves Maglev gives "
                "each parent 1/3 within 1%, `crates/edge-core/src/upstream/maglev.rs`).\n\n")
        f.write("| phase | requests | errors | origin fetches | served by p1 / p2 / p3 |\n"
                "|---|---|---|---|---|\n")
        for label, reqs, errs, kinds, ofetch, served in rows:
            k = ", ".join(f"{n} {v}" for n, v in kinds.items() if v) or "none"
            f.write(f"| {label} | {reqs} | {errs} ({k}) | {ofetch} | "
                    + " / ".join(str(s) for s in served) + " |\n")
        f.write("\nReading it: in phase B the edge's requests for p2's keys go to p1 and p3 "
                "(which fetch them from the origin once: the origin fetches of phase B are "
                "p2's share of the objects requested meanwhile). Requests sent to p2 between its "
                "death and the edge's verdict (up to `fails` x `interval`, 400 ms) fail to "
                "connect and are retried at once on the parent that the table of the usable "
                "servers names (a GET is idempotent), so a client sees no error for them. "
                "In phase C p2 is back with its cache: its keys return to it and it answers "
                "them from disk, so the origin sees little.\n\n")
        f.write("The edge's view at the end (`/status`):\n\n```json\n"
                + json.dumps(status.get("upstreams"), indent=2) + "\n```\n")
    if a.keep:
        print(f"run directory kept: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(open(os.path.join(a.out, "tier.md")).read())


if __name__ == "__main__":
    main()
