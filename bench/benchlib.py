"""What every bench/ script needs: where the repository and our binaries are, a free
loopback port, waiting for a server to listen, and reading its JSON endpoints; and the
callgrind measure of instructions per request (bench/hit-cost.py, bench/sites-cost.py).

The scripts run as `python3 bench/<name>.py`, so this directory is on their import path.
"""

import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# edgebench hands the scripts it runs the binaries it would use (`--bin-dir`).
BIN = os.environ.get("EDGEBENCH_BIN_DIR") or os.path.join(ROOT, "target", "release")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, timeout=30):
    """Return once 127.0.0.1:port accepts a connection; exit the script after timeout s."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def raise_nofile():
    """Soft descriptor limit up to the hard one (a server started after, or with this as
    its `preexec_fn`, inherits it)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def read_answers(socks, marker=b"ok\n"):
    """Read on each socket until `marker` has come; exit the script if one closes first."""
    for s in socks:
        got = b""
        while marker not in got:
            chunk = s.recv(4096)
            if not chunk:
                raise SystemExit("server closed a connection")
            got += chunk


def get_json(port, path, timeout=10):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return json.loads(r.read())


def callgrind_ir(cmd, port, work, warm, load, n1, n2, reps, start_timeout, ready=None,
                 all_threads=False):
    """Instructions per request of `cmd` (a server listening on `port`) under
    `valgrind --tool=callgrind --separate-threads=yes`, run in `work` (the callgrind
    files stay there): once it listens (within `start_timeout` s), `warm()`; then, `reps`
    times, zero the counters, `load(n1)`, dump; zero, `load(n2)`, dump. Each rep gives
    the busiest thread's (Ir(n2) - Ir(n1)) / (n2 - n1), both of the thread busiest in the
    n2 dump (another thread busier during the short n1 dump, a compression pool or
    the cache manager, would otherwise be subtracted instead); with `all_threads`, the
    same of the sum over every thread (a request whose work is spread over threads: a
    cache miss's file I/O pool); returns (median, all reps).
    `ready(timeout)` replaces the TCP wait for a server that does not listen on TCP
    (bench/quic-stacks/run.py: UDP)."""
    out = os.path.join(work, "cg.out")
    vg = ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--dump-instr=no",
          f"--callgrind-out-file={out}.%p"] + cmd
    # valgrind's and the server's own output, to read when the server does not start.
    log = open(os.path.join(work, "valgrind.log"), "wb")
    p = subprocess.Popen(vg, stdout=log, stderr=subprocess.STDOUT, cwd=work,
                         start_new_session=True)
    log.close()
    try:
        if ready is None:
            try:
                wait_port(port, start_timeout)
            except SystemExit:
                with open(os.path.join(work, "valgrind.log"), errors="replace") as f:
                    sys.stderr.write(f.read()[-3000:])
                raise
        else:
            ready(start_timeout)
        warm()
        per_req = []
        for rep in range(reps):
            totals = {}
            for n in (n1, n2):
                subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True)
                load(n)
                tag = f"r{rep}n{n}"
                subprocess.run(["callgrind_control", f"--dump={tag}", str(p.pid)],
                               capture_output=True)
                time.sleep(0.5)
                totals[n] = thread_irs(work, p.pid, tag)
            if all_threads:
                ir = sum(totals[n2].values()) - sum(totals[n1].values())
            else:
                thread = max(totals[n2], key=totals[n2].get)
                ir = totals[n2][thread] - totals[n1].get(thread, 0)
            per_req.append(ir / (n2 - n1))
        return sorted(per_req)[len(per_req) // 2], per_req
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def add_callgrind_args(ap, reps):
    """The arguments of `callgrind_ir` on an ArgumentParser: --n1, --n2, --reps."""
    ap.add_argument("--n1", type=int, default=2000)
    ap.add_argument("--n2", type=int, default=12000)
    ap.add_argument("--reps", type=int, default=reps)


def thread_irs(work, pid, tag):
    """Ir by thread (callgrind's thread number, the file name's `-NN`) of the dumps
    (one per thread) carrying this tag."""
    irs = {}
    for name in os.listdir(work):
        if not name.startswith(f"cg.out.{pid}"):
            continue
        with open(os.path.join(work, name), errors="replace") as f:
            text = f.read()
        if f"desc: Trigger: Client Request: {tag}" not in text and tag not in text[:4000]:
            continue
        m = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
        if m:
            thread = name.rsplit("-", 1)[-1] if "-" in name else name
            irs[thread] = max(irs.get(thread, 0), int(m.group(1)))
    return irs


# Process groups, CPU time and child processes (bench/limits.py, bench/tls.py,
# bench/index-scale.py).

def group_pids(pgid):
    """Every process of the process group `pgid`."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.getpgid(int(d)) == pgid:
                    pids.append(int(d))
            except OSError:
                pass
    return pids


def group_cpu_split(pgid):
    """(user, system) CPU seconds of every process of the group, all threads, plus what
    the children they reaped used (cutime, cstime: a child exiting mid-measure, such as
    nginx's cache loader, keeps its time in the sum), from /proc/<pid>/stat. System time
    is the kernel's work on the group's behalf: system calls, and softirq work that ran
    in its context (a loopback send delivers to the receiving socket there)."""
    tick = os.sysconf("SC_CLK_TCK")
    user = system = 0
    for pid in group_pids(pgid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11]) + int(fields[13])
            system += int(fields[12]) + int(fields[14])
        except OSError:
            pass
    return user / tick, system / tick


def group_cpu_s(pgid):
    """User + system CPU seconds of the group: see group_cpu_split."""
    return sum(group_cpu_split(pgid))


def group_ctxsw(pgid):
    """Context switches (voluntary and involuntary) of every thread of every process of
    the group so far, from /proc/<pid>/task/<tid>/status (a process's own status counts
    its first thread only)."""
    total = 0
    for pid in group_pids(pgid):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    total += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
            except OSError:
                pass  # a thread that ended
    return total


def cpu_busy():
    """Per CPU, (busy seconds so far: all but idle, iowait and steal; of which softirq),
    from /proc/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    busy = {}
    with open("/proc/stat") as f:
        for ln in f:
            name, *vals = ln.split()
            if name.startswith("cpu") and name != "cpu":
                v = [int(x) for x in vals]
                busy[int(name[3:])] = ((sum(v[:8]) - v[3] - v[4] - v[7]) / tick, v[6] / tick)
    return busy


def stop_group(proc, grace=5):
    """SIGTERM to proc's process group, SIGKILL after grace seconds (workers that outlive
    their master go too)."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


def parse_cpu_list(text):
    """'0-2,5' -> [0, 1, 2, 5]; ValueError on anything else."""
    cpus = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            a, b = int(a), int(b)
            if a > b:
                raise ValueError(f"{part}: the range runs backwards")
            cpus.extend(range(a, b + 1))
        else:
            cpus.append(int(part))
    if not cpus:
        raise ValueError("empty CPU list")
    return cpus


# Shared by the comparison scripts (bench/limits.py, bench/tls.py) and the callgrind
# ones (bench/limits-cost.py, bench/sites-cost.py, bench/hit-cost.py).

def need(tool, script, nginx_hint=""):
    """The tool's path (nginx: EDGEBENCH_NGINX first, as edgebench); exits with
    `<script>: <tool> is not installed` (and `nginx_hint` after it for nginx) if missing."""
    path = os.environ.get("EDGEBENCH_NGINX") if tool == "nginx" else None
    path = path or shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/usr/local/sbin")
    if not path:
        raise SystemExit(f"{script}: {tool} is not installed"
                         + (nginx_hint if tool == "nginx" else ""))
    return path


def origin_requests(port):
    """The requests edgeorigin on `port` has answered so far."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as r:
        return json.loads(r.read())["requests"]


def spawn_origin(port):
    """edgeorigin on 127.0.0.1:port, output discarded (the caller waits for the port)."""
    return subprocess.Popen([os.path.join(BIN, "edgeorigin"), "--listen",
                             f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def med(xs, fmt):
    """The median of the values that are not None, formatted, with (min–max) when there
    are several; "n/a" when there are none."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    m = fmt.format(statistics.median(xs))
    if len(xs) == 1:
        return m
    return f"{m} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def log_lines(dir):
    """The non-blank lines of `dir`'s error.log and stderr.log, each prefixed by its file."""
    lines = []
    for name in ("error.log", "stderr.log"):
        p = os.path.join(dir, name)
        if os.path.exists(p):
            with open(p, errors="replace") as f:
                lines += [f"{name}: {ln.rstrip()}" for ln in f if ln.strip()]
    return lines


# What the instruction-count scripts (hit-cost, h2-cost, sites-cost, limits-cost)
# measure: one worker, no access log, unlimited keep-alive, one disk cache `c1` with a
# RAM tier, the origin as upstream `origin`. `listen` is the `[[listen]]` tables and
# `memory` the `[memory_cache]` table.
MEMORY_64M = '[memory_cache]\nsize = "64m"\nmax_object_size = "1m"\n'
# A location's body that caches everything from the origin for 10 minutes.
CACHED_LOCATION = 'proxy = "origin"\ncache = ["c1"]\ncache_valid = { "200" = "10m" }\n'


def listen_toml(port):
    """A plain `[[listen]]` on 127.0.0.1:`port`."""
    return f'[[listen]]\naddr = "127.0.0.1:{port}"\n'


def cost_node_toml(dir, origin, listen, memory=MEMORY_64M):
    """The cache node of the cost scripts (see above), without its locations."""
    return f'''workers = 1
worker_cpu_affinity = "off"
access_log = "off"
keepalive_requests = 1000000
error_log = {{ path = "{dir}/error.log", level = "warn" }}
{listen}[[cache]]
name = "c1"
path = "{dir}/cache"
{memory}[[upstream]]
name = "origin"
servers = ["127.0.0.1:{origin}"]
keepalive = 4
'''


def checked_edgecache(dir, text):
    """Writes `text` to dir/edgecache.toml, checks it with `edgecache -t` (raises if it
    fails) and returns the command line that runs it."""
    path = os.path.join(dir, "edgecache.toml")
    with open(path, "w") as f:
        f.write(text)
    subprocess.run([os.path.join(BIN, "edgecache"), "-t", "-c", path], check=True,
                   capture_output=True)
    return [os.path.join(BIN, "edgecache"), "-c", path]


def strace_counts(path):
    """Calls per syscall name from an `strace -c -o path` summary (the total line left
    out)."""
    calls = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if (len(parts) >= 5 and parts[0][0].isdigit() and parts[-1].isidentifier()
                    and parts[-1] != "total"):
                calls[parts[-1]] = int(parts[3])
    return calls


class PerfStat:
    """`perf stat -x, -e EVENTS TARGET -o out` running in the background (root for
    tracepoints): TARGET is `["-p", "PID,PID"]` (those processes, every thread) or
    `["-C", "CPUS"]` (everything on those CPUs). Starts, then waits `settle` seconds for
    perf to attach; `stop()` ends it and returns {event name without its `group:`
    prefix (`sys_enter`, `hrtimer_start`, `context-switches`): count}."""

    def __init__(self, events, target, out, settle=0.5):
        self.out = out
        self.proc = subprocess.Popen(["perf", "stat", "-x", ",", "-e", ",".join(events)]
                                     + list(target) + ["-o", out],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(settle)

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait()
        counts = {}
        with open(self.out) as f:
            for line in f:
                parts = line.strip().split(",")
                if len(parts) > 2 and re.fullmatch(r"[0-9.]+", parts[0]):
                    counts[parts[2].split(":")[-1]] = float(parts[0])
        return counts


def edgeload_requests(url, requests, connections=1, timeout="300s", extra=()):
    """Sends `requests` requests to `url` with one edgeload thread over `connections`
    connections (`extra` flags before the URL); returns how many it reports answered."""
    # The run's duration bounds it too (edgeload's default is 10 s, which a slow run
    # under callgrind can reach first): give it the same generous bound as a request.
    cmd = [os.path.join(BIN, "edgeload"), "-t", "1", "-c", str(connections), "-T", timeout,
           "-d", timeout, "--requests", str(requests), *extra, url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"(\d+) requests in", out)
    return int(m.group(1)) if m else requests


# The comparison scripts' command line and report header (bench/limits.py,
# bench/video.py; bench/tls.py's versions).

def server_client_cpus(ap, cpus, script):
    """`--cpus SERVER:CLIENT` (or None: the first two CPUs this process may use) as two
    CPU lists; a bad value is `ap.error`, fewer than 2 CPUs exits the script."""
    allowed = sorted(os.sched_getaffinity(0))
    if not cpus:
        if len(allowed) < 2:
            raise SystemExit(f"{script}: needs 2 CPUs (the server on one, the clients on "
                             "another)")
        return [allowed[0]], [allowed[1]]
    try:
        srv, cli = cpus.split(":", 1)
        server, client = parse_cpu_list(srv), parse_cpu_list(cli)
    except ValueError as e:
        ap.error(f"--cpus {cpus}: {e} (use SERVER:CLIENT, e.g. 0:1 or 0-1:2,3)")
    bad = [c for c in server + client if c not in allowed]
    if bad:
        ap.error(f"--cpus: CPU {bad[0]} is not one this process may use ({allowed})")
    if set(server) & set(client):
        ap.error("--cpus: the server and client CPUs overlap")
    return server, client


def first_line(cmd):
    """The first line `cmd` prints (stdout, then stderr), or "unknown"."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (p.stdout + p.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown"


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, or "unknown"."""
    with open("/proc/cpuinfo") as f:
        for ln in f:
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    return "unknown"


def machine(edgecache_bin, nginx):
    """The versions and machine a comparison with nginx ran on, for its report."""
    model = cpu_model()
    ec = first_line([edgecache_bin, "--version"])
    if os.environ.get("EDGEBENCH_EDGECACHE"):
        ec += f" (`{edgecache_bin}`, from EDGEBENCH_EDGECACHE)"
    return {"edgecache": ec, "nginx": first_line([nginx, "-v"]),
            "kernel": os.uname().release, "cpu": f"{model}, {os.cpu_count()} CPUs"}


# Config text the scripted experiments share (str.format templates: `{{`/`}}` are
# literal braces). EDGECACHE_REUSEPORT_HEAD: an edgecache with `{workers}` workers on
# one reuseport listener `{port}`, admin on `{admin}`, no access log, and one disk cache
# "bench" of `{max_size}` under `{dir}`. NGINX_HTTP_COMMON: the lines every nginx peer's
# `http {{ }}` block starts with (temp paths under `{dir}`, sendfile, keep-alive as
# edgecache's).
EDGECACHE_REUSEPORT_HEAD = """workers = {workers}
worker_cpu_affinity = "off"
accept = "reuseport"
keepalive_requests = 1000000
access_log = "off"
error_log = {{ path = "{dir}/error.log", level = "warn" }}
pid = "{dir}/edgecache.pid"

[[listen]]
addr = "127.0.0.1:{port}"

[admin]
listen = "127.0.0.1:{admin}"

[[cache]]
name = "bench"
path = "{dir}/cache"
levels = "1:2"
max_size = "{max_size}"
inactive = "1h"
keys_zone = "64m"
"""

NGINX_HTTP_COMMON = """    access_log off;
    default_type application/octet-stream;
    client_body_temp_path {dir}/client_body_temp;
    proxy_temp_path {dir}/proxy_temp;
    fastcgi_temp_path {dir}/fastcgi_temp;
    uwsgi_temp_path {dir}/uwsgi_temp;
    scgi_temp_path {dir}/scgi_temp;

    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
"""
