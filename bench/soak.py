#!/usr/bin/env python3
"""Soak: edgecache under hours-long mixed traffic with origin faults, purges and reloads.

Usage: python3 bench/soak.py [--minutes 10] [--out docs/results] [--interval 10]

Starts edgeorigin and edgecache (target/release; `cargo build --release -p edgecache
-p edgeorigin -p edgeload`) on loopback ports, then for `--minutes`:

- hits: Zipf over 300 x 10 KiB objects and 40 x 50 KiB text, every body checked
  against the origin's X-Checksum (edgeload --verify): a wrong byte is an error;
- misses and origin faults: no-store objects, objects that expire every 2 s (revalidated),
  resets mid-body (reset=1), slow bodies (slow_bps), 503s (use_stale), 300 ms delays;
- Range requests on 64 KiB objects, and compressed text (Accept-Encoding: gzip, br);
- a purge every 3 s (URL, soft, prefix by turns) and a SIGHUP reload every 30 s.

Every `--interval` seconds it samples the server: RSS, open descriptors, descriptors
open on cache files, connections, requests and 5xx answers. It writes `soak.md` (the
table, the load's error counts, and the verdict: no growth after warm-up) and `soak.svg`
(RSS and descriptors over time) to `--out`. Exit status 1 when the verdict is growth or
the verified loads saw errors. All traffic stays on 127.0.0.1; every load is rate-limited.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from benchlib import ROOT, BIN, free_port, wait_port



def http(method, url, data=None):
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read().decode()


def config(work, port, admin, origin):
    return f'''workers = 1
worker_cpu_affinity = "off"
access_log = "off"
error_log = {{ path = "{work}/error.log", level = "warn" }}

[[listen]]
addr = "127.0.0.1:{port}"

[admin]
listen = "127.0.0.1:{admin}"

[[cache]]
name = "soak"
path = "{work}/cache"
max_size = "48m"
inactive = "2m"
keys_zone = "8m"

[memory_cache]
size = "8m"
max_object_size = "64k"

[[upstream]]
name = "origin"
servers = ["127.0.0.1:{origin}"]
keepalive = 16
read_timeout = "3s"

[[location]]
prefix = "/"
proxy = "origin"
cache = ["soak"]
cache_valid = {{ "200" = "10m" }}
use_stale = ["error", "timeout", "updating", "http_5xx"]
background_update = true
compress = ["br", "gzip"]
'''


class Server:
    def __init__(self, work):
        self.work = work
        self.origin_port = free_port()
        self.port = free_port()
        self.admin = free_port()
        self.origin = subprocess.Popen(
            [os.path.join(BIN, "edgeorigin"), "--listen", f"127.0.0.1:{self.origin_port}",
             "--max-age", "3600"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_port(self.origin_port, timeout=15)
        self.cfg = os.path.join(work, "edgecache.toml")
        with open(self.cfg, "w") as f:
            f.write(config(work, self.port, self.admin, self.origin_port))
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "edgecache"), "-c", self.cfg],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "stderr.log"), "w"),
            start_new_session=True, cwd=work)
        wait_port(self.port, timeout=15)
        wait_port(self.admin, timeout=15)

    def stop(self):
        for p in (self.proc, self.origin):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in (self.proc, self.origin):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def sample(srv):
    pid = srv.proc.pid
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    fds = cache_fds = 0
    cache_dir = os.path.join(srv.work, "cache")
    for fd in os.listdir(f"/proc/{pid}/fd"):
        fds += 1
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(cache_dir):
                cache_fds += 1
        except OSError:
            pass
    st = json.loads(http("GET", f"http://127.0.0.1:{srv.admin}/status"))
    metrics = http("GET", f"http://127.0.0.1:{srv.admin}/metrics")
    fivexx = 0
    for line in metrics.splitlines():
        if line.startswith('edgecache_requests_total{class="5xx"}'):
            fivexx = int(line.split()[-1])
    totals = st["totals"]
    cache = st["caches"][0]
    return {
        "rss_kib": rss, "fds": fds, "cache_fds": cache_fds,
        "active": totals["active"], "requests": totals["requests"], "5xx": fivexx,
        "objects": cache["entries"], "disk_mib": cache["disk_bytes"] / (1 << 20),
    }


LOADS = [
    # (name, rate, headers, mix lines, paths per line, verify)
    ("hits", 400, [], ["8 /obj/10k", "2 /txt/50k"], 300, True),
    ("faults", 60, [], [
        "3 /obj/4k?no_store=1", "3 /obj/8k?max_age=2", "1 /obj/20k?reset=1",
        "1 /obj/30k?slow_bps=400000", "1 /obj/6k?status=503&max_age=1",
        "1 /obj/5k?delay_ms=300"], 20, False),
    ("range", 60, ["Range: bytes=100-1099"], ["1 /obj/64k"], 100, False),
    ("compressed", 40, ["Accept-Encoding: gzip, br"], ["1 /txt/20k"], 40, False),
]


def mix_file(work, name, lines, port, paths):
    """A mix file: each line of `lines` (`WEIGHT /path[?query]`) expanded to `paths`
    URLs with ids 1..paths before the query (edgeload's --paths would append the id
    after the query)."""
    path = os.path.join(work, f"mix-{name}.txt")
    with open(path, "w") as f:
        for l in lines:
            w, p = l.split(" ", 1)
            base, _, q = p.partition("?")
            for i in range(1, paths + 1):
                f.write(f"{w} http://127.0.0.1:{port}{base}/{i}{'?' + q if q else ''}\n")
    return path


def start_loads(srv, minutes):
    procs = []
    for name, rate, headers, lines, paths, verify in LOADS:
        js = os.path.join(srv.work, f"load-{name}.json")
        cmd = [os.path.join(BIN, "edgeload"), "-t", "1", "-c", "8", "-d", f"{minutes * 60}s",
               "-R", str(rate), "-T", "5s", "--json", js]
        if name == "hits":
            # Zipf over the ids: --paths appends them (no query on these lines).
            mix = os.path.join(srv.work, f"mix-{name}.txt")
            with open(mix, "w") as f:
                for l in lines:
                    w, p = l.split(" ", 1)
                    f.write(f"{w} http://127.0.0.1:{srv.port}{p}\n")
            cmd += ["--mix", mix, "--paths", str(paths), "--zipf", "1.0"]
        else:
            cmd += ["--mix", mix_file(srv.work, name, lines, srv.port, paths)]
        if verify:
            cmd.append("--verify")
        for h in headers:
            cmd += ["-H", h]
        cmd.append(f"http://127.0.0.1:{srv.port}/")
        procs.append((name, js, subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL)))
    return procs


def churn(srv, stop):
    """Purges every 3 s (URL, soft URL, prefix) and a SIGHUP every 30 s."""
    n = 0
    last_hup = time.time()
    base = f"http://127.0.0.1:{srv.port}"
    while not stop.wait(3):
        n += 1
        kind = n % 3
        form = [f"url={base}/obj/10k/{n % 300 + 1}",
                f"url={base}/txt/50k/{n % 300 + 1}&soft=1",
                f"prefix={base}/obj/8k/"][kind]
        try:
            http("POST", f"http://127.0.0.1:{srv.admin}/purge", form.encode())
        except urllib.error.HTTPError as e:
            if e.code != 404:  # 404: nothing was stored under that URL (yet)
                print(f"purge failed: {e}", file=sys.stderr)
        except Exception as e:
            print(f"purge failed: {e}", file=sys.stderr)
        if time.time() - last_hup >= 30:
            os.kill(srv.proc.pid, signal.SIGHUP)
            last_hup = time.time()


def svg(samples, path):
    w, h, pad = 720, 300, 50
    t = [s["t"] for s in samples]
    series = [("RSS (MiB)", [s["rss_kib"] / 1024 for s in samples], "#1f77b4"),
              ("descriptors", [s["fds"] for s in samples], "#d62728"),
              ("cache files open", [s["cache_fds"] for s in samples], "#2ca02c")]
    tmax = max(t) or 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w/2}" y="16" text-anchor="middle" font-size="13">soak: RSS and '
           f'descriptors over time (each scaled to its own maximum)</text>',
           f'<line x1="{pad}" y1="{h-pad}" x2="{w-pad}" y2="{h-pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h-pad}" stroke="black"/>',
           f'<text x="{w/2}" y="{h-15}" text-anchor="middle">minutes</text>']
    for i in range(0, int(tmax // 60) + 1):
        x = pad + (w - 2 * pad) * (i * 60) / tmax
        out.append(f'<text x="{x:.0f}" y="{h-pad+14}" text-anchor="middle">{i}</text>')
    for k, (label, ys, color) in enumerate(series):
        top = max(ys) or 1
        pts = " ".join(f"{pad + (w - 2 * pad) * ti / tmax:.1f},"
                       f"{h - pad - (h - 2 * pad) * y / top:.1f}" for ti, y in zip(t, ys))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>')
        out.append(f'<text x="{pad + 10 + k * 220}" y="{pad - 8}" fill="{color}">{label}, '
                   f'max {top:.0f}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results"))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="soak-")
    srv = Server(work)
    stop = threading.Event()
    samples = []
    started = time.time()
    loads = start_loads(srv, a.minutes)
    churner = threading.Thread(target=churn, args=(srv, stop), daemon=True)
    churner.start()
    try:
        while time.time() - started < a.minutes * 60:
            time.sleep(a.interval)
            if srv.proc.poll() is not None:
                raise SystemExit(f"edgecache exited ({srv.proc.returncode}): see {work}")
            s = sample(srv)
            s["t"] = time.time() - started
            samples.append(s)
            print(f"{s['t']:6.0f}s rss {s['rss_kib']} KiB fds {s['fds']} cache fds "
                  f"{s['cache_fds']} active {s['active']} requests {s['requests']} "
                  f"5xx {s['5xx']}", flush=True)
        stop.set()
        results = {}
        for name, js, p in loads:
            p.wait(60)
            with open(js) as f:
                results[name] = json.load(f)
    finally:
        stop.set()
        for _, _, p in loads:
            if p.poll() is None:
                p.kill()
        srv.stop()
    # Growth after warm-up: the last third against the middle third.
    n = len(samples)
    mid = samples[n // 3: 2 * n // 3] or samples
    last = samples[2 * n // 3:] or samples

    def med(xs, k):
        v = sorted(x[k] for x in xs)
        return v[len(v) // 2]

    rss_growth = med(last, "rss_kib") / max(med(mid, "rss_kib"), 1)
    fd_growth = med(last, "fds") - med(mid, "fds")
    def errors(r):
        return sum(v for v in r.get("errors", {}).values() if isinstance(v, (int, float)))

    hit_errors = errors(results["hits"])
    grew = rss_growth > 1.10 or fd_growth > 20
    os.makedirs(a.out, exist_ok=True)
    svg(samples, os.path.join(a.out, "soak.svg"))
    with open(os.path.join(a.out, "soak.md"), "w") as f:
        f.write(f"# Soak: {a.minutes:g} minutes of mixed traffic with faults, purges and reloads\n\n")
        f.write(f"Produced by `python3 bench/soak.py --minutes {a.minutes:g}` on "
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))} (2-vCPU VM, one "
                "edgecache worker; the loads, the origin and the sampler share the machine).\n\n")
        f.write(__doc__.split("\n\n", 2)[2].split("\n\nEvery")[0] + "\n\n")
        f.write("## Verdict\n\n")
        f.write(f"- RSS, median of the last third against the middle third: **{rss_growth:.3f}×** "
                f"(growth means > 1.10×)\n")
        f.write(f"- descriptors, same: **{fd_growth:+d}** (growth means > +20)\n")
        f.write(f"- verified hits with a wrong or failed body: **{hit_errors}**\n")
        f.write(f"- edgecache stayed up the whole time; **{'GROWTH' if grew else 'no growth'}** "
                f"after warm-up\n\n")
        f.write("## The loads (edgeload --json)\n\n| load | requests | errors (by kind) | req/s | p99 ms |\n|---|---|---|---|---|\n")
        for name, r in results.items():
            p99 = r.get("latency_us", {}).get("p99", 0) / 1000
            kinds = ", ".join(f"{k} {v}" for k, v in r.get("errors", {}).items() if v)
            f.write(f"| {name} | {r.get('requests', 0)} | {errors(r)} ({kinds or 'none'}) | "
                    f"{r.get('rps', 0):.0f} | {p99:.1f} |\n")
        f.write("\nErrors in `faults` are the injected ones (resets mid-body, 503s when no "
                "stale copy exists yet, slow bodies past the 5 s client timeout).\n\n")
        f.write("## Over time\n\n![RSS and descriptors over time](soak.svg)\n\n")
        f.write("| s | RSS KiB | fds | cache fds | active | requests | 5xx | objects | disk MiB |\n"
                "|---|---|---|---|---|---|---|---|---|\n")
        for s in samples:
            f.write(f"| {s['t']:.0f} | {s['rss_kib']} | {s['fds']} | {s['cache_fds']} | "
                    f"{s['active']} | {s['requests']} | {s['5xx']} | {s['objects']} | "
                    f"{s['disk_mib']:.1f} |\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"written {a.out}/soak.md: rss x{rss_growth:.3f}, fds {fd_growth:+d}, "
          f"verified-hit errors {hit_errors}")
    sys.exit(1 if grew or hit_errors else 0)


if __name__ == "__main__":
    main()
