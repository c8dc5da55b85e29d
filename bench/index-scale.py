#!/usr/bin/env python3
"""Index and storage at scale: fill a cache with many small objects and measure what each
costs in RAM and on disk, edgecache against nginx proxy_cache in the same run.

Usage: python3 bench/index-scale.py [--objects 1000000] [--servers edgecache,nginx]
                                    [--connections 32] [--out docs/results]

For each server: one worker in front of edgeorigin, a cache directory on this machine's
disk; a fill of `--objects` distinct objects of 512 B, 1 KiB, 2 KiB and 4 KiB (a quarter
each, every object requested once: `edgeload --paths N/4 --sequential --requests N/4`
per size), then:

- index RAM per object: (PSS of all the server's processes after the fill - PSS before)
  / objects. PSS, not RSS, so that nginx's keys_zone (shared memory, mapped by its master,
  worker, cache manager and loader) is counted once; edgecache is one process;
- disk per object: blocks allocated under the cache directory (du) / objects, and the
  apparent bytes;
- fill rate: objects / fill time (the origin, the load generator and the server share
  the machine's two cores: a ratio between servers, not a disk ceiling);
- hits over the whole set: `--hit-seconds` of requests for ids drawn uniformly from all
  the objects (so almost every hit is one the worker has not seen lately: edgecache reads
  the object's header from its file, as nginx does), req/s and server CPU per request;
- edgecache restarts on the same directory, the time until /status says the loader is
  done, and objects per second: after a clean stop (the index snapshot written at
  shutdown is restored at start, then the loader's walk checks it by `readdir` alone),
  and cold (the snapshot deleted first, as after a crash: the loader reads every
  header). (nginx's cache loader starts a minute after nginx does and loads in the
  background; nginx answers from the files meanwhile, so its load time is not
  comparable and not measured.)

Needs target/release/{edgecache,edgeorigin,edgeload} and nginx (bench/peers/install.sh).
Writes `index-scale.md` to --out. Disk: about 5 KiB per object per server (10 GB for the
default); the run directory is removed at the end (--keep keeps it).
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

from benchlib import ROOT, BIN, free_port, wait_port, get_json, group_pids

SIZES = ["512", "1k", "2k", "4k"]


def pss_kib(pgid):
    """Proportional set size of every process of the group, in KiB."""
    total = 0
    for pid in group_pids(pgid):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def du(path):
    """(allocated bytes, apparent bytes, files) under path."""
    alloc = apparent = files = 0
    for dirpath, _, names in os.walk(path):
        for n in names:
            try:
                st = os.lstat(os.path.join(dirpath, n))
            except OSError:
                continue
            alloc += st.st_blocks * 512
            apparent += st.st_size
            files += 1
    return alloc, apparent, files


EDGECACHE = """
workers = 1
worker_cpu_affinity = "off"
access_log = "off"
error_log = {{ path = "{dir}/error.log", level = "warn" }}
pid = "{dir}/edgecache.pid"

[[listen]]
addr = "127.0.0.1:{port}"

[admin]
listen = "127.0.0.1:{admin}"

[[cache]]
name = "scale"
path = "{dir}/cache"
levels = "1:2"
max_size = "64g"
inactive = "1d"
keys_zone = "8g"
loader_files = 1000
loader_sleep = "1ms"

# No RAM tier (on by default): the report measures the index and the disk tier.
[memory_cache]
size = "off"

[[upstream]]
name = "origin"
servers = ["127.0.0.1:{origin}"]
keepalive = 64

[[location]]
prefix = "/"
proxy = "origin"
cache = ["scale"]
cache_valid = {{ "200" = "1d" }}
"""

NGINX = """
daemon off;
master_process on;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body_temp;
    proxy_temp_path {dir}/proxy_temp;
    fastcgi_temp_path {dir}/fastcgi_temp;
    uwsgi_temp_path {dir}/uwsgi_temp;
    scgi_temp_path {dir}/scgi_temp;
    proxy_cache_path {dir}/cache levels=1:2 keys_zone=scale:512m max_size=64g inactive=1d
                     use_temp_path=off loader_files=1000 loader_sleep=1ms;
    upstream origin {{ server 127.0.0.1:{origin}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache scale;
            proxy_cache_valid 200 1d;
        }}
    }}
}}
"""


class Server:
    def __init__(self, kind, work, origin):
        self.kind = kind
        self.dir = os.path.join(work, kind)
        os.makedirs(self.dir)
        # nginx's workers run as an unprivileged user: they must be able to write here.
        os.chmod(self.dir, 0o777)
        self.port = free_port()
        self.admin = free_port()
        text = (EDGECACHE if kind == "edgecache" else NGINX).format(
            dir=self.dir, port=self.port, admin=self.admin, origin=origin)
        self.cfg = os.path.join(self.dir, "server.conf")
        with open(self.cfg, "w") as f:
            f.write(text)
        self.proc = None

    def start(self):
        if self.kind == "edgecache":
            cmd = [os.path.join(BIN, "edgecache"), "-c", self.cfg]
        else:
            nginx = shutil.which("nginx") or "/usr/sbin/nginx"
            cmd = [nginx, "-c", self.cfg, "-p", self.dir]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(self.dir, "stderr.log"), "a"),
                                     start_new_session=True)
        wait_port(self.port, timeout=20)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def pss(self):
        return pss_kib(self.proc.pid)


def cpu_s(pgid):
    """User + system CPU seconds of every process of the group."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in group_pids(pgid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / tick


def hits(server, n, conns, secs, work):
    """Random hits over all n objects for secs: (requests, errors, server CPU seconds)."""
    mix = os.path.join(work, "mix.txt")
    js = os.path.join(work, f"hits-{server.kind}.json")
    c0 = cpu_s(server.proc.pid)
    subprocess.run(
        [os.path.join(BIN, "edgeload"), "-t", "1", "-c", str(conns), "-d", f"{secs}s",
         "-T", "10s", "--mix", mix, "--paths", str(n // len(SIZES)), "--json", js,
         f"http://127.0.0.1:{server.port}/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    cpu = cpu_s(server.proc.pid) - c0
    with open(js) as f:
        r = json.load(f)
    errors = sum(v for v in r["errors"].values() if isinstance(v, (int, float)))
    return r["requests"], errors, cpu


def restart(s, row, label, cold):
    """Start s on its directory (after deleting the index snapshot when cold) and time
    the loader."""
    snap = os.path.join(s.dir, "cache", "index.snapshot")
    row[f"{label}_snapshot_file"] = os.path.exists(snap)
    if cold and os.path.exists(snap):
        os.remove(snap)
    t0 = time.time()
    s.start()
    st = get_json(s.admin, "/status")["caches"][0]
    row[f"{label}_serving_s"] = time.time() - t0
    row[f"{label}_serving_entries"] = st["entries"]
    while not st["loader"]["done"]:
        time.sleep(0.05)
        st = get_json(s.admin, "/status")["caches"][0]
    row[f"{label}_load_s"] = time.time() - t0
    row[f"{label}_loaded"] = st["loader"]["loaded"]
    row[f"{label}_snapshot"] = st["loader"].get("snapshot", 0)
    row[f"{label}_entries"] = st["entries"]
    time.sleep(1.0)
    row[f"{label}_pss_kib"] = s.pss()
    s.stop()


def fill(server, n, conns, work):
    """Each size's ids 1..n/4 asked once (one edgeload run per size, so the hit phase
    can draw (size, id) pairs that are all stored)."""
    per = n // len(SIZES)
    mix = os.path.join(work, "mix.txt")
    with open(mix, "w") as f:
        for s in SIZES:
            f.write(f"1 /obj/{s}\n")
    total = errors = 0
    t0 = time.time()
    for size in SIZES:
        js = os.path.join(work, f"fill-{server.kind}-{size}.json")
        subprocess.run(
            [os.path.join(BIN, "edgeload"), "-t", "1", "-c", str(conns), "-d", "900s",
             "-T", "10s", "--paths", str(per), "--sequential", "--requests", str(per),
             "--json", js, f"http://127.0.0.1:{server.port}/obj/{size}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        with open(js) as f:
            r = json.load(f)
        total += r["requests"]
        errors += sum(v for v in r["errors"].values() if isinstance(v, (int, float)))
    return total, errors, time.time() - t0


def measure(kind, a, work, oport):
    s = Server(kind, work, oport)
    s.start()
    time.sleep(1.0)
    before = s.pss()
    reqs, errors, secs = fill(s, a.objects, a.connections, work)
    time.sleep(2.0)
    after = s.pss()
    row = {"server": kind, "requests": reqs, "errors": errors, "fill_s": secs,
           "pss_before_kib": before, "pss_after_kib": after}
    if kind == "edgecache":
        st = get_json(s.admin, "/status")["caches"][0]
        row["objects"] = st["entries"]
        row["index_estimate"] = st["mem_bytes"]
    if a.hit_seconds > 0:
        row["hit_requests"], row["hit_errors"], row["hit_cpu_s"] = hits(
            s, a.objects, a.connections, a.hit_seconds, work)
        row["hit_s"] = a.hit_seconds
    s.stop()
    alloc, apparent, files = du(os.path.join(s.dir, "cache"))
    row.update(disk_alloc=alloc, disk_apparent=apparent, files=files)
    row.setdefault("objects", files)
    if kind == "edgecache":
        # index.snapshot is not an object: out of the disk figures.
        snap = os.path.join(s.dir, "cache", "index.snapshot")
        if os.path.exists(snap):
            row["snapshot_bytes"] = os.path.getsize(snap)
            row["disk_alloc"] -= os.stat(snap).st_blocks * 512
            row["disk_apparent"] -= row["snapshot_bytes"]
            row["files"] -= 1
        restart(s, row, "snapshot", cold=False)
        restart(s, row, "cold", cold=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--servers", default="edgecache,nginx")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--hit-seconds", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results"))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="index-scale-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    os.chmod(work, 0o755)
    oport = free_port()
    origin = subprocess.Popen(
        [os.path.join(BIN, "edgeorigin"), "--listen", f"127.0.0.1:{oport}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_port(oport, timeout=20)
    started = time.time()
    rows = []
    try:
        for kind in a.servers.split(","):
            row = measure(kind, a, work, oport)
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    finally:
        os.killpg(origin.pid, signal.SIGTERM)
        origin.wait()
    write_report(a, rows, started)
    if a.keep:
        print(f"run directory kept: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)


def write_report(a, rows, started):
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "index-scale.md")
    with open(path, "w") as f:
        f.write("# Index and storage at scale: RAM and disk per small object\n\n")
        f.write(f"Produced by `python3 bench/index-scale.py --objects {a.objects} --servers "
                f"{a.servers}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))} "
                "(2-vCPU VM, ext4 on a virtual disk; origin, load and server share the "
                "machine).\n\n")
        f.write(__doc__.split("\n\n", 2)[2].split("\n\nNeeds")[0] + "\n\n")
        f.write("## Results\n\n")
        f.write("| server | objects | errors | index RAM per object (PSS) | disk per object "
                "(allocated) | apparent bytes per object | fill rate (objects/s) |\n")
        f.write("|---|---|---|---|---|---|---|\n")
        for r in rows:
            n = max(r["objects"], 1)
            f.write(f"| {r['server']} | {r['objects']} | {r['errors']} | "
                    f"{(r['pss_after_kib'] - r['pss_before_kib']) * 1024 / n:,.0f} B | "
                    f"{r['disk_alloc'] / n:,.0f} B | {r['disk_apparent'] / n:,.0f} B | "
                    f"{r['requests'] / r['fill_s']:,.0f} |\n")
        if any("hit_requests" in r for r in rows):
            f.write(f"\nRandom hits over all the objects ({a.hit_seconds} s each, "
                    f"{a.connections} connections):\n\n")
            f.write("| server | requests | errors | req/s | server CPU per request |\n")
            f.write("|---|---|---|---|---|\n")
            for r in rows:
                if "hit_requests" in r:
                    f.write(f"| {r['server']} | {r['hit_requests']} | {r['hit_errors']} | "
                            f"{r['hit_requests'] / r['hit_s']:,.0f} | "
                            f"{r['hit_cpu_s'] * 1e6 / max(r['hit_requests'], 1):,.1f} µs |\n")
        for r in rows:
            if "snapshot_load_s" in r:
                n = max(r["objects"], 1)
                f.write("\nedgecache restarts (`loader_files = 1000`, `loader_sleep = \"1ms\"`):\n\n")
                f.write("| restart | index restored, serving | loader done | objects/s | "
                        "from the snapshot | read by the loader | PSS after |\n")
                f.write("|---|---|---|---|---|---|---|\n")
                for label, what in (("snapshot", "clean stop (snapshot)"),
                                    ("cold", "cold (no snapshot)")):
                    f.write(f"| {what} | {r[label + '_serving_entries']:,} objects at "
                            f"{r[label + '_serving_s']:.2f} s | {r[label + '_load_s']:.1f} s | "
                            f"{r[label + '_entries'] / r[label + '_load_s']:,.0f} | "
                            f"{r[label + '_snapshot']:,} | {r[label + '_loaded']:,} | "
                            f"{r[label + '_pss_kib'] / 1024:,.0f} MiB |\n")
                f.write(f"\nThe snapshot file: {r.get('snapshot_bytes', 0) / n:.1f} bytes per "
                        "object. The index's own estimate (`mem_bytes`, what `keys_zone` is "
                        f"checked against): {r['index_estimate'] / n:,.0f} B per object.\n")
        if len(rows) == 2:
            e, g = rows
            ram = lambda r: (r["pss_after_kib"] - r["pss_before_kib"]) / max(r["objects"], 1)
            if ram(g) > 0 and g["disk_alloc"] > 0 and g["objects"] > 0:
                f.write(f"\nRatios (edgecache / nginx): index RAM per object "
                        f"**{ram(e) / ram(g):.2f}×**, disk per object "
                        f"**{(e['disk_alloc'] / max(e['objects'], 1)) / (g['disk_alloc'] / max(g['objects'], 1)):.2f}×**, "
                        f"fill rate **{(e['requests'] / e['fill_s']) / (g['requests'] / g['fill_s']):.2f}×**.\n")
        f.write("\nRaw:\n\n```json\n" + json.dumps(rows, indent=1) + "\n```\n")
    print(open(path).read())


if __name__ == "__main__":
    main()
