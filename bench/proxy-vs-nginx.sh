#!/usr/bin/env bash
# edgecache vs nginx as a plain (uncached) reverse proxy to the same edgeorigin.
# One worker each, pinned to CPU $SERVER_CPU; wrk and the origin on CPU $CLIENT_CPU.
# Runs are interleaved A B A B so machine drift cancels; prints a Markdown table.
#
#   bench/proxy-vs-nginx.sh [duration_s] [reps]
#
# Needs: nginx and wrk (apt-get install -y nginx wrk), a release build (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10}
REPS=${2:-3}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
CONNS=${CONNS:-50}
BIN=${BIN:-target/release}
command -v nginx >/dev/null && command -v wrk >/dev/null || { echo "needs nginx and wrk (apt-get install -y nginx wrk)" >&2; exit 2; }
[ -x $BIN/edgecache ] && [ -x $BIN/edgeorigin ] || { echo "needs a release build: cargo build --release" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; exit 1; }

OPORT=$(free_port); EPORT=$(free_port); NPORT=$(free_port)
taskset -c "$CLIENT_CPU" $BIN/edgeorigin --listen 127.0.0.1:$OPORT --threads 1 & pids+=($!)
wait_port $OPORT

cat > "$work/edgecache.toml" <<CONF
workers = 1
worker_cpu_affinity = [$SERVER_CPU]
access_log = "off"
[[listen]]
addr = "127.0.0.1:$EPORT"
[[upstream]]
name = "origin"
servers = ["127.0.0.1:$OPORT"]
keepalive = 64
[[location]]
prefix = "/"
proxy = "origin"
CONF
taskset -c "$SERVER_CPU" $BIN/edgecache -c "$work/edgecache.toml" & pids+=($!); EPID=$!
wait_port $EPORT

mkdir -p "$work/nginx/logs"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
worker_cpu_affinity $(python3 -c "print(bin(1<<$SERVER_CPU)[2:])");
daemon off;
master_process off;
error_log $work/nginx/logs/error.log warn;
pid $work/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  upstream origin { server 127.0.0.1:$OPORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NPORT;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering on;
    }
  }
}
CONF
taskset -c "$SERVER_CPU" nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" -e "$work/nginx/logs/error.log" & pids+=($!); NPID=$!
wait_port $NPORT

# wrk prints e.g. "Requests/sec:  12345.67" and "99%   1.23ms"
run_wrk() { # port path
  taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${DUR}s" --latency "http://127.0.0.1:$1$2" 2>&1
}
rps() { awk '/Requests\/sec/ {print $2}'; }
p99_ms() { awk '$1=="99%" { v=$2; if (v ~ /us$/) { sub(/us$/,"",v); v=v/1000 } else if (v ~ /ms$/) { sub(/ms$/,"",v) } else if (v ~ /s$/) { sub(/s$/,"",v); v=v*1000 }; print v }'; }
cpu_ticks() { awk '{print $14+$15}' /proc/$1/stat; }
TICK=$(getconf CLK_TCK)
# One measured run: prints "req/s p99_ms cpu_us_per_req" for the server with this pid/port.
measure() { # pid port path
  local t0 out t1 r
  t0=$(cpu_ticks "$1"); out=$(run_wrk "$2" "$3"); t1=$(cpu_ticks "$1")
  r=$(echo "$out" | rps)
  echo "$r $(echo "$out" | p99_ms) $(python3 -c "print(f'{($t1-$t0)*1e6/$TICK/($r*$DUR):.1f}')")"
}

echo "| object | run | edgecache req/s | nginx req/s | req/s ratio | edgecache p99 ms | nginx p99 ms | edgecache CPU µs/req | nginx CPU µs/req | CPU/req ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for path in /obj/1k/1 /obj/100k/1; do
  # warm both
  run_wrk $EPORT $path >/dev/null; run_wrk $NPORT $path >/dev/null
  for r in $(seq "$REPS"); do
    read -r er ep ec < <(measure $EPID $EPORT $path)
    read -r nr np nc < <(measure $NPID $NPORT $path)
    echo "| ${path} | $r | $er | $nr | $(python3 -c "print(f'{$er/$nr:.2f}')") | $ep | $np | $ec | $nc | $(python3 -c "print(f'{$ec/$nc:.2f}')") |"
  done
done
