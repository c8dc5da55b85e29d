#!/usr/bin/env python3
"""Memory per idle keep-alive connection: edgecache against nginx, same test.

Usage: python3 bench/idle-memory.py [--connections 5000] [--servers edgecache,nginx]

Each server (one worker, access log off, a `return`-style 200 on /) is started, its RSS
read from /proc; then N client connections, opened at `--rate` per second, each send one
request, read the answer and stay open (the server holds them in its keep-alive wait);
RSS is read again after a second. (RSS after - RSS before) / N is the memory an idle connection costs the server
in user space (kernel socket buffers are not in RSS, for either server).
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, BIN, free_port, raise_nofile, read_answers, wait_port



def rss_kib(pid):
    """RSS of a process and its children (nginx runs a worker under its master)."""
    total = 0
    pids = [pid] + children(pid)
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total


def children(pid):
    out = []
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            for c in f.read().split():
                out.append(int(c))
                out.extend(children(int(c)))
    except FileNotFoundError:
        pass
    return out


def edgecache(dir, port):
    path = os.path.join(dir, "edgecache.toml")
    with open(path, "w") as f:
        f.write(f'''workers = 1
worker_cpu_affinity = "off"
access_log = "off"
keepalive_timeout = "300s"
worker_connections = 100000
error_log = {{ path = "{dir}/error.log", level = "warn" }}
[[listen]]
addr = "127.0.0.1:{port}"
[[location]]
prefix = "/"
return = {{ status = 200, body = "ok\\n" }}
''')
    return [os.path.join(BIN, "edgecache"), "-c", path]


def nginx(dir, port):
    path = os.path.join(dir, "nginx.conf")
    with open(path, "w") as f:
        f.write(f'''daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 100000;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 100000; }}
http {{
    access_log off;
    client_body_temp_path {dir}/cbt; proxy_temp_path {dir}/pt;
    fastcgi_temp_path {dir}/ft; uwsgi_temp_path {dir}/ut; scgi_temp_path {dir}/st;
    keepalive_timeout 300s;
    server {{ listen 127.0.0.1:{port}; location / {{ return 200 "ok\\n"; }} }}
}}
''')
    return ["nginx", "-c", path, "-p", dir]


def measure(cmd, port, n, work, rate):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         cwd=work, start_new_session=True, preexec_fn=raise_nofile)
    socks = []
    try:
        wait_port(port)
        # Warm the allocator and the server's first-connection paths.
        warm = socket.create_connection(("127.0.0.1", port))
        warm.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        warm.recv(4096)
        time.sleep(0.5)
        before = rss_kib(p.pid)
        req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        start = time.time()
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(req)
            socks.append(s)
            if rate:
                # Paced: as connections arrive at a node, not all in one burst.
                ahead = start + (i + 1) / rate - time.time()
                if ahead > 0:
                    time.sleep(ahead)
        read_answers(socks)
        time.sleep(1.0)
        after = rss_kib(p.pid)
        return before, after
    finally:
        for s in socks:
            s.close()
        os.killpg(p.pid, 9)
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--servers", default="edgecache,nginx")
    ap.add_argument("--rate", type=float, default=1000.0,
                    help="new connections per second (0: all at once)")
    a = ap.parse_args()
    raise_nofile()
    print("| server | RSS before (KiB) | RSS with idle connections (KiB) | bytes per idle connection |")
    print("|---|---|---|---|")
    for name in a.servers.split(","):
        if name == "nginx" and not shutil.which("nginx"):
            print("nginx not installed: skipped", file=sys.stderr)
            continue
        work = tempfile.mkdtemp(prefix=f"idle-{name}-")
        port = free_port()
        cmd = edgecache(work, port) if name == "edgecache" else nginx(work, port)
        before, after = measure(cmd, port, a.connections, work, a.rate)
        per = (after - before) * 1024 / a.connections
        print(f"| {name} | {before} | {after} | {per:.0f} |", flush=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
