#!/usr/bin/env bash
# edgeload versus wrk (Debian package), side by side in one run.
#
#   bench/edgeload-vs-wrk.sh [DURATION] [ROUNDS] [RATE]
#
# 1. Throughput: nginx (temp config, 1 worker, `return 200 "ok"`, access_log off, free
#    loopback port) pinned to core 0; edgeload and wrk each run `-t 1 -c 50 -d DURATION`
#    pinned to core 1, interleaved A/B/A/B for ROUNDS rounds. Prints req/s, the client's
#    CPU time per request, and the edgeload/wrk ratio per round.
# 2. Latency accuracy: the nginx worker is frozen (SIGSTOP) for 200 ms of every second.
#    A client that sends on a schedule sees 20% of its requests arrive during a stall and
#    wait on average 100 ms: p90 ~100 ms, p99 ~190 ms. wrk (closed loop) only ever has
#    50 requests waiting per stall, so it reports far better percentiles than a real
#    user would see (coordinated omission); edgeload -R RATE measures from the intended
#    send time and should show the real ones.
#
# The nginx it starts is its own process (never the system service) and is stopped at
# the end. Needs root for apt-get when nginx/wrk are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"; }
DUR=${1:-10s}
ROUNDS=${2:-2}
RATE=${3:-2000}

if ! command -v nginx >/dev/null || ! command -v wrk >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx wrk >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
cargo build --release -p edgeload >/dev/null 2>&1 || cargo build --release -p edgeload
EL=$PWD/target/release/edgeload

TMP=$(mktemp -d)
NGINX_PID=""
STALL_PID=""
cleanup() {
    [ -n "$STALL_PID" ] && kill "$STALL_PID" 2>/dev/null || true
    if [ -n "$NGINX_PID" ]; then
        for w in $(ps --ppid "$NGINX_PID" -o pid= 2>/dev/null); do kill -CONT "$w" 2>/dev/null || true; done
        kill "$NGINX_PID" 2>/dev/null || true
        wait "$NGINX_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$TMP/logs"
cat >"$TMP/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $TMP/nginx.pid;
error_log $TMP/logs/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$PORT;
        location / { return 200 "ok"; }
    }
}
EOF
taskset -c 0 "$NGINX" -c "$TMP/nginx.conf" -p "$TMP/" &
NGINX_PID=$!
for _ in $(seq 50); do
    (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break
    sleep 0.1
done
URL="http://127.0.0.1:$PORT/"

echo "# edgeload vs wrk $(date -u +%F) on $(nproc) CPUs; nginx $("$NGINX" -v 2>&1 | sed 's/.*\///'), $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}')"
echo "# nginx pinned to core 0, client pinned to core 1: -t 1 -c 50 -d $DUR"
echo
echo "| round | tool | requests/s | client CPU (s) | CPU per request (us) |"
echo "|---|---|---|---|---|"
TIMEFORMAT='%U %S'
run_client() { # name -> "rps cpu_s us_per_req"
    local name=$1; shift
    { time taskset -c 1 "$@" >"$TMP/out.txt"; } 2>"$TMP/time.txt"
    local rps reqs cpu
    rps=$(awk '/^Requests\/sec:/ {print $2}' "$TMP/out.txt")
    reqs=$(awk '/ requests in / {print $1}' "$TMP/out.txt")
    cpu=$(awk '{printf "%.2f", $1 + $2}' "$TMP/time.txt")
    echo "$rps $cpu $(awk -v c="$cpu" -v n="$reqs" 'BEGIN {printf "%.2f", c * 1e6 / n}')"
}
declare -a RATIOS
for r in $(seq "$ROUNDS"); do
    read -r e_rps e_cpu e_us < <(run_client edgeload "$EL" -t 1 -c 50 -d "$DUR" "$URL")
    echo "| $r | edgeload | $e_rps | $e_cpu | $e_us |"
    read -r w_rps w_cpu w_us < <(run_client wrk wrk -t 1 -c 50 -d "$DUR" "$URL")
    echo "| $r | wrk | $w_rps | $w_cpu | $w_us |"
    RATIOS+=("$(awk -v a="$e_rps" -v b="$w_rps" 'BEGIN {printf "%.3f", a / b}')")
done
echo
echo "edgeload/wrk requests/s ratio per round: ${RATIOS[*]}"
echo

echo "## Latency under a periodic 200 ms stall every second (nginx worker SIGSTOP/SIGCONT)"
WORKER=$(ps --ppid "$NGINX_PID" -o pid= | head -1 | tr -d ' ')
(
    while true; do
        kill -STOP "$WORKER"; sleep 0.2
        kill -CONT "$WORKER"; sleep 0.8
    done
) &
STALL_PID=$!
pct() { # file -> "p50 p75 p90 p99 p99.9 p99.99" (from a Latency Distribution block)
    awk '/Latency Distribution/ {on=1; next} on && /%/ {printf "%s ", $2; n++} n==6 {exit}' "$1"
}
echo
echo "| client | mode | requests | p50 | p75 | p90 | p99 | p99.9 | p99.99 |"
echo "|---|---|---|---|---|---|---|---|---|"
taskset -c 1 wrk -t 1 -c 50 -d "$DUR" --latency "$URL" >"$TMP/w.txt"
# wrk prints only four percentiles.
echo "| wrk | closed loop | $(awk '/ requests in / {print $1}' "$TMP/w.txt") | $(awk '/Latency Distribution/ {on=1; next} on && /%/ {printf "%s | ", $2; n++} n==4 {exit}' "$TMP/w.txt") - | - |"
taskset -c 1 "$EL" -t 1 -c 50 -d "$DUR" --latency "$URL" >"$TMP/e.txt"
echo "| edgeload | closed loop | $(awk '/ requests in / {print $1}' "$TMP/e.txt") | $(pct "$TMP/e.txt" | sed 's/ / | /g')"
taskset -c 1 "$EL" -t 1 -c 50 -R "$RATE" -d "$DUR" --latency "$URL" >"$TMP/r.txt"
echo "| edgeload | -R $RATE (open loop) | $(awk '/ requests in / {print $1}' "$TMP/r.txt") | $(pct "$TMP/r.txt" | sed 's/ / | /g')"
echo
echo "Expected for a uniform arrival process with 20% of time stalled 200 ms: p90 ~100 ms, p99 ~190 ms."
