#!/usr/bin/env python3
"""Per-repetition ratios of an `edgebench fill` run (its JSON): edgecache's req/s per
CPU-second of the server ÷ nginx's, paired by repetition, with req/s and CPU per
request; median (min-max) over repetitions. Several runs (e.g. before and after a
change) side by side:

    python3 bench/fill-ratios.py before=docs/results/fill-before.json after=docs/results/fill.json
"""

import json
import sys


def spread(xs, fmt):
    xs = sorted(xs)
    return f"{fmt(xs[len(xs) // 2])} ({fmt(xs[0])}–{fmt(xs[-1])})"


def rows(path):
    d = json.load(open(path))
    cells = {}
    for c in d["cells"]:
        cells[(c["workload"], c["server"], c["rep"])] = c
    out = []
    for w in d["plan"]["workloads"]:
        name = w["name"]
        reps = sorted({r for (wn, s, r) in cells if wn == name})
        ratio, rps, cpu, nrps, ncpu, share = [], [], [], [], [], []
        for r in reps:
            e, n = cells.get((name, "edgecache", r)), cells.get((name, "nginx", r))
            if not e or not n or not e["cpu_us_per_req"] or not n["cpu_us_per_req"]:
                continue
            rps.append(e["load"]["rps"])
            nrps.append(n["load"]["rps"])
            cpu.append(e["cpu_us_per_req"])
            ncpu.append(n["cpu_us_per_req"])
            # req/s per CPU-second = 1e6 / (CPU µs per request)
            ratio.append(n["cpu_us_per_req"] / e["cpu_us_per_req"])
            if e.get("origin_requests") is not None and e["load"]["requests"]:
                share.append(e["origin_requests"] / e["load"]["requests"])
        if ratio:
            out.append((w.get("label") or name, ratio, rps, nrps, cpu, ncpu, share))
    return out


def main():
    runs = [a.split("=", 1) if "=" in a else (a, a) for a in sys.argv[1:]]
    print("| run | size | req/s per CPU vs nginx | edgecache req/s | nginx req/s | "
          "edgecache CPU µs/req | nginx CPU µs/req | origin fetches/request |")
    print("|---|---|---|---|---|---|---|---|")
    for label, path in runs:
        for (size, ratio, rps, nrps, cpu, ncpu, share) in rows(path):
            f0 = lambda x: f"{x:.0f}"
            print(f"| {label} | {size} | **{spread(ratio, lambda x: f'{x:.2f}×')}** | "
                  f"{spread(rps, f0)} | {spread(nrps, f0)} | {spread(cpu, f0)} | "
                  f"{spread(ncpu, f0)} | {spread(share, lambda x: f'{x:.3f}') if share else 'n/a'} |")


if __name__ == "__main__":
    main()
