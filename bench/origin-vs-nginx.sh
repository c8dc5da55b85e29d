#!/usr/bin/env bash
# edgeorigin vs nginx serving the same objects: edgeorigin generates them, nginx serves
# the identical bytes from files (page cache, sendfile, open_file_cache). One worker each,
# pinned to CPU $SERVER_CPU; wrk on CPU $CLIENT_CPU. Runs are interleaved A B A B so
# machine drift cancels; prints a Markdown table with req/s, the server's CPU time per
# request (utime+stime of the serving process from /proc, robust to a busy client) and
# the ratios.
#
#   bench/origin-vs-nginx.sh [duration_s] [reps]
#
# Needs: nginx and wrk (apt-get install -y nginx wrk), a release build of edgeorigin
# (cargo build --release -p edgeorigin). nginx runs from a temp prefix, never as the
# system service.
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10}
REPS=${2:-2}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
CONNS=${CONNS:-50}
SIZES=${SIZES:-"1k 1m"}
# Also a many-objects row: MANY distinct objects of size MANY_SIZE, requested at random
# (for edgeorigin mostly body-cache misses: generation per request, as in cache-miss
# experiments; for nginx distinct page-cache files). MANY=0 skips it.
MANY=${MANY:-200}
MANY_SIZE=${MANY_SIZE:-1m}
BIN=target/release
command -v nginx >/dev/null && command -v wrk >/dev/null || { echo "needs nginx and wrk (apt-get install -y nginx wrk)" >&2; exit 2; }
[ -x $BIN/edgeorigin ] || { echo "needs a release build: cargo build --release -p edgeorigin" >&2; exit 2; }

work=$(mktemp -d)
chmod 755 "$work" # nginx workers run as an unprivileged user and must read www/
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; exit 1; }

OPORT=$(free_port); NPORT=$(free_port)
taskset -c "$SERVER_CPU" $BIN/edgeorigin --listen 127.0.0.1:$OPORT --threads 1 2>"$work/edgeorigin.log" & pids+=($!)
wait_port $OPORT

# The same bytes as files: nginx serves /obj/<size>/1 from $work/www/obj/<size>/1.
for s in $SIZES; do
  mkdir -p "$work/www/obj/$s"
  curl -sf -o "$work/www/obj/$s/1" "http://127.0.0.1:$OPORT/obj/$s/1"
done
if [ "$MANY" -gt 0 ]; then
  mkdir -p "$work/www/obj/$MANY_SIZE"
  for i in $(seq 0 $((MANY - 1))); do
    curl -sf -o "$work/www/obj/$MANY_SIZE/$i" "http://127.0.0.1:$OPORT/obj/$MANY_SIZE/$i"
  done
  cat > "$work/rand.lua" <<LUA
math.randomseed(42)
request = function() return wrk.format("GET", "/obj/$MANY_SIZE/" .. math.random(0, $((MANY - 1)))) end
LUA
fi
chmod -R a+rX "$work/www"
curl -sf "http://127.0.0.1:$OPORT/stats?reset=1" >/dev/null

mkdir -p "$work/nginx/logs"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  open_file_cache max=1000 inactive=60s;
  keepalive_requests 1000000;
  keepalive_timeout 75s;
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$NPORT;
    root $work/www;
  }
}
CONF
taskset -c "$SERVER_CPU" nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" & NMASTER=$!; pids+=($NMASTER)
wait_port $NPORT
NWORKER=$(pgrep -P "$NMASTER" | head -1)
EPID=${pids[0]}
for s in $SIZES; do
  cmp <(curl -sf "http://127.0.0.1:$NPORT/obj/$s/1") <(curl -sf "http://127.0.0.1:$OPORT/obj/$s/1") \
    || { echo "nginx and edgeorigin bodies differ for $s" >&2; exit 1; }
done

TCK=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # port pid path -> "req/s cpu_us_per_request"; path "rand" runs rand.lua
  local before after out r script=() url="http://127.0.0.1:$1$3"
  if [ "$3" = rand ]; then script=(-s "$work/rand.lua"); url="http://127.0.0.1:$1/"; fi
  before=$(cpu_ticks "$2")
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${DUR}s" "${script[@]}" "$url")
  after=$(cpu_ticks "$2")
  r=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  awk -v r="$r" -v t=$((after - before)) -v tck="$TCK" -v d="$DUR" 'BEGIN {printf "%.0f %.1f\n", r, t * 1e6 / tck / (r * d)}'
}

echo "edgeorigin vs nginx $(nginx -v 2>&1 | sed 's/.*\///'), wrk -t1 -c$CONNS -d${DUR}s, server on CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU, $REPS interleaved reps"
echo
echo "| object | edgeorigin req/s | nginx req/s | req/s ratio | edgeorigin CPU µs/req | nginx CPU µs/req | CPU/req ratio |"
echo "|---|---|---|---|---|---|---|"
rows=()
for s in $SIZES; do rows+=("$s"); done
[ "$MANY" -gt 0 ] && rows+=("rand")
for s in "${rows[@]}"; do
  path="/obj/$s/1"
  label="$s"
  if [ "$s" = rand ]; then path=rand; label="$MANY_SIZE, $MANY ids at random"; fi
  e_all=(); n_all=(); ec_all=(); nc_all=()
  for _ in $(seq "$REPS"); do
    read -r r c < <(run $OPORT "$EPID" "$path"); e_all+=("$r"); ec_all+=("$c")
    read -r r c < <(run $NPORT "$NWORKER" "$path"); n_all+=("$r"); nc_all+=("$c")
  done
  mean() { printf '%s\n' "$@" | awk '{s+=$1} END {printf "%.1f", s/NR}'; }
  e=$(mean "${e_all[@]}"); n=$(mean "${n_all[@]}"); ec=$(mean "${ec_all[@]}"); nc=$(mean "${nc_all[@]}")
  ratio=$(awk -v a="$e" -v b="$n" 'BEGIN {printf "%.2f", a/b}')
  cratio=$(awk -v a="$ec" -v b="$nc" 'BEGIN {printf "%.2f", a/b}')
  echo "| $label | ${e%.*} (${e_all[*]}) | ${n%.*} (${n_all[*]}) | $ratio | $ec (${ec_all[*]}) | $nc (${nc_all[*]}) | $cratio |"
done
echo
echo "req/s ratio: edgeorigin/nginx (above 1: edgeorigin serves more). CPU/req ratio: edgeorigin/nginx (below 1: edgeorigin spends less server CPU per request)."
