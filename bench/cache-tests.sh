#!/usr/bin/env bash
# Runs the public HTTP cache test suite (https://github.com/http-tests/cache-tests,
# the suite behind cache-tests.fyi) against edgecache, all on 127.0.0.1:
#
#   suite client (node) --> edgecache (proxy + disk cache) --> suite server (node)
#
# and prints the passes per test kind (required, optimal, check) and every test that did
# not pass, grouped by kind, with the suite's own verdict and message.
#
# Usage:
#   bench/cache-tests.sh [--out FILE] [--id TEST_ID] [--keep]
#     --out FILE   also write the suite's results JSON (the format of its results/ dir)
#     --id ID      run one test with the suite's request/response dump (no summary)
#     --keep       keep the temp dir (config, edgecache and server logs, access log)
#
# Environment:
#   CACHE_TESTS_DIR   the suite's checkout (default: $HOME/cache-tests). When absent it
#                     is cloned from GitHub; without network, clone it there yourself:
#                       git clone https://github.com/http-tests/cache-tests "$CACHE_TESTS_DIR"
#   EDGECACHE_BIN     the edgecache binary (default: the newer of target/release/edgecache
#                     and target/debug/edgecache; `cargo build --release -p edgecache`
#                     when neither exists)
#   EDGECACHE_LOCATION_EXTRA  extra TOML lines for the [[location]] (e.g.
#                     'cache_honour_no_cache = true')
#   CACHE_TESTS_TIMEOUT       seconds the whole client run may take (default 1200)
#
# Exit status: 0 when the suite ran (whatever the test results), non-zero on a setup
# failure (no node, no suite, no binary, a process that did not start, the client
# crashing, or a PUT through edgecache that does not reach the suite's server).
#
# The pass counts follow the suite: a test passes when its result is `true`
# (test-engine/lib/display.mjs); the verdict shown for the others is the suite's
# determineTestResult (test-engine/lib/results.mjs): fail (required), optional_fail
# (optimal), no (check), setup_fail, dependency_fail, harness_fail, retry.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUITE=${CACHE_TESTS_DIR:-$HOME/cache-tests}
OUT=""
TEST_ID=""
KEEP=0

die() { echo "cache-tests.sh: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) [[ $# -ge 2 ]] || die "--out needs a file"; OUT=$2; shift 2 ;;
    --out=*) OUT=${1#--out=}; shift ;;
    --id) [[ $# -ge 2 ]] || die "--id needs a test id"; TEST_ID=$2; shift 2 ;;
    --id=*) TEST_ID=${1#--id=}; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
if [[ -n "$OUT" ]]; then
  OUT=$(cd "$(dirname "$OUT")" 2>/dev/null && pwd)/$(basename "$OUT") \
    || die "--out: no such directory: $(dirname "$OUT")"
fi

# ---- node and the suite ----
command -v node >/dev/null || die "node is not installed (NodeJS >= 18 needed; e.g. apt-get install -y nodejs npm)"
command -v npm >/dev/null || die "npm is not installed (e.g. apt-get install -y npm)"
NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
[[ "$NODE_MAJOR" -ge 18 ]] || die "node $(node --version) is too old (>= 18 needed for fetch)"

if [[ ! -f "$SUITE/test-engine/cli.mjs" ]]; then
  if [[ -e "$SUITE" ]]; then
    die "$SUITE exists but is not a checkout of http-tests/cache-tests (no test-engine/cli.mjs); set CACHE_TESTS_DIR"
  fi
  echo "cache-tests.sh: no suite at $SUITE; cloning https://github.com/http-tests/cache-tests" >&2
  if ! git clone --depth 1 https://github.com/http-tests/cache-tests "$SUITE" >&2; then
    die "could not clone the suite. Clone it yourself and point CACHE_TESTS_DIR at it:
    git clone https://github.com/http-tests/cache-tests $SUITE
    (cd $SUITE && npm i)"
  fi
fi
SUITE=$(cd "$SUITE" && pwd)
if [[ ! -d "$SUITE/node_modules/undici" ]]; then
  echo "cache-tests.sh: npm i in $SUITE" >&2
  (cd "$SUITE" && npm i --no-audit --no-fund >&2) || die "npm i failed in $SUITE"
fi

# ---- the edgecache binary ----
BIN=${EDGECACHE_BIN:-}
if [[ -z "$BIN" ]]; then
  for b in "$ROOT/target/release/edgecache" "$ROOT/target/debug/edgecache"; do
    if [[ -x "$b" && ( -z "$BIN" || "$b" -nt "$BIN" ) ]]; then BIN=$b; fi
  done
fi
if [[ -z "$BIN" ]]; then
  echo "cache-tests.sh: no edgecache binary; cargo build --release -p edgecache" >&2
  (cd "$ROOT" && cargo build --release -p edgecache >&2) || die "cargo build failed"
  BIN=$ROOT/target/release/edgecache
fi
[[ -x "$BIN" ]] || die "edgecache binary not found or not executable: $BIN"

# ---- temp dir, processes, cleanup ----
TMP=$(mktemp -d "${TMPDIR:-/tmp}/edgecache-cache-tests.XXXXXX")
SERVER_PID=""
EDGE_PID=""
CLI_PID=""
cleanup() {
  local rc=$?
  for pid in $CLI_PID $EDGE_PID $SERVER_PID; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in $CLI_PID $EDGE_PID $SERVER_PID; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [[ $KEEP = 1 ]]; then
    echo "cache-tests.sh: kept $TMP" >&2
  else
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_ports() { # N distinct free TCP ports on 127.0.0.1
  node -e '
    const net = require("net"); const n = +process.argv[1]; const ss = []; const ps = [];
    (function next () {
      if (ss.length === n) { ss.forEach(s => s.close()); console.log(ps.join(" ")); return }
      const s = net.createServer(); s.listen(0, "127.0.0.1", () => { ss.push(s); ps.push(s.address().port); next() })
    })()' "$1"
}

wait_port() { # port pid name log
  for _ in $(seq 150); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    if ! kill -0 "$2" 2>/dev/null; then
      echo "cache-tests.sh: $3 exited before listening; its log ($4):" >&2
      tail -n 30 "$4" >&2 || true
      exit 2
    fi
    sleep 0.1
  done
  echo "cache-tests.sh: $3 did not listen on 127.0.0.1:$1 within 15 s; its log ($4):" >&2
  tail -n 30 "$4" >&2 || true
  exit 2
}

read -r SERVER_PORT EDGE_PORT ADMIN_PORT <<<"$(free_ports 3)"
[[ -n "$ADMIN_PORT" ]] || die "could not find free ports"

# The suite's server (it listens on every interface of that port; its pid file goes to
# the temp dir, not the default /tmp/http-cache-test-server.pid).
(cd "$SUITE" && exec env npm_config_port="$SERVER_PORT" npm_config_protocol=http \
  npm_config_pidfile="$TMP/server.pid" node test-engine/server/server.mjs) \
  >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
wait_port "$SERVER_PORT" "$SERVER_PID" "suite server" "$TMP/server.log"

# edgecache: the config of crates/edgecache/tests/conformance.rs (defaults for every
# caching key: no cache_valid, so responses without explicit freshness or a validator are
# not stored), one worker, a fresh cache directory.
mkdir -p "$TMP/cache"
cat >"$TMP/edgecache.toml" <<EOF
workers = 1
worker_cpu_affinity = "off"
worker_connections = 1024
access_log = "$TMP/access.log"
error_log = { path = "stderr", level = "warn" }

[[listen]]
addr = "127.0.0.1:$EDGE_PORT"

[[cache]]
name = "c1"
path = "$TMP/cache"

[[upstream]]
name = "suite"
servers = ["127.0.0.1:$SERVER_PORT"]

[[location]]
prefix = "/"
proxy = "suite"
cache = ["c1"]
# The suite expects a Range miss to reach the origin as a Range (partial-*); the
# default, "whole", fetches the whole object (docs/cache.md, "Partial content").
range_fetch = "forward"
${EDGECACHE_LOCATION_EXTRA:-}

[admin]
listen = "127.0.0.1:$ADMIN_PORT"
allow = ["127.0.0.1/32", "::1/128"]
EOF
if ! "$BIN" -t -c "$TMP/edgecache.toml" >"$TMP/check.log" 2>&1; then
  cat "$TMP/check.log" >&2
  die "edgecache -t refused the generated config ($TMP/edgecache.toml, kept with --keep)"
fi
"$BIN" -c "$TMP/edgecache.toml" >"$TMP/edgecache.log" 2>&1 &
EDGE_PID=$!
wait_port "$EDGE_PORT" "$EDGE_PID" "edgecache" "$TMP/edgecache.log"

BASE="http://127.0.0.1:$EDGE_PORT"
echo "cache-tests.sh: suite $SUITE ($(git -C "$SUITE" rev-parse --short HEAD 2>/dev/null || echo '?'))" >&2
echo "cache-tests.sh: edgecache $BIN on $BASE -> suite server 127.0.0.1:$SERVER_PORT" >&2

# Preflight: the client stores each test's config with a PUT through the cache, and reads
# the server's state with a GET; both must reach the server.
PRE="preflight-$$-$RANDOM"
code=$(curl -s -o "$TMP/preflight.out" -w '%{http_code}' -X PUT \
  -H 'content-type: application/json' --data '[{}]' "$BASE/config/$PRE" || true)
if [[ "$code" != 201 ]]; then
  echo "cache-tests.sh: PUT $BASE/config/$PRE answered '$code', not 201:" >&2
  head -c 500 "$TMP/preflight.out" >&2 || true
  echo >&2
  tail -n 20 "$TMP/edgecache.log" >&2 || true
  exit 3
fi

# ---- run the client ----
# (cli.mjs reads `npm_config_id || npm_package_config_id` and runs one test unless the
# result is '': both are set, as `npm run cli` would from package.json.) In the
# background and waited for, so a SIGTERM/SIGINT runs the cleanup at once.
(cd "$SUITE" && exec env npm_config_base="$BASE" npm_config_id="$TEST_ID" npm_package_config_id="$TEST_ID" \
  timeout "${CACHE_TESTS_TIMEOUT:-1200}" node --no-warnings test-engine/cli.mjs) \
  >"$TMP/results.json" 2>"$TMP/cli.err" &
CLI_PID=$!
crc=0
wait "$CLI_PID" || crc=$?
CLI_PID=""
if [[ -n "$TEST_ID" ]]; then
  cat "$TMP/results.json"
  cat "$TMP/cli.err" >&2
  [[ $crc -eq 0 ]] || die "the suite's client exited $crc"
  exit 0
fi
if [[ $crc -ne 0 ]]; then
  tail -n 30 "$TMP/cli.err" >&2 || true
  die "the suite's client exited $crc (124: over CACHE_TESTS_TIMEOUT)"
fi
if [[ -s "$TMP/cli.err" ]]; then
  echo "cache-tests.sh: client stderr (harness errors):" >&2
  head -n 20 "$TMP/cli.err" >&2
fi
if [[ -n "$OUT" ]]; then
  cp "$TMP/results.json" "$OUT"
  echo "cache-tests.sh: results written to $OUT" >&2
fi

# ---- summary, with the suite's own test list and verdict logic ----
(cd "$SUITE" && node --no-warnings --input-type=module - "$TMP/results.json") <<'EOF'
import fs from 'fs'
import tests from './tests/index.mjs'
import { determineTestResult, resultTypes } from './test-engine/lib/results.mjs'

const results = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'))
const verdictName = new Map(Object.entries(resultTypes).map(([k, v]) => [v, k]))
const kinds = new Map() // kind -> { total, passed, failing: [] }
for (const suite of tests) {
  for (const test of suite.tests) {
    if (!(test.id in results)) continue // not run (browser-only)
    const kind = test.kind || 'required'
    if (!kinds.has(kind)) kinds.set(kind, { total: 0, passed: 0, failing: [] })
    const k = kinds.get(kind)
    k.total++
    const r = results[test.id]
    if (r === true) { k.passed++; continue }
    const verdict = verdictName.get(determineTestResult(tests, test.id, results)) || '?'
    const msg = Array.isArray(r) ? `${r[0]}: ${r[1]}` : String(r)
    k.failing.push({ suite: suite.name, id: test.id, name: test.name, verdict, msg, deps: test.depends_on })
  }
}
const order = ['required', 'optimal', 'check', ...[...kinds.keys()].filter(k => !['required', 'optimal', 'check'].includes(k))]
let total = 0; let passed = 0
console.log('== edgecache vs http-tests/cache-tests (passed = result true, as cache-tests.fyi)')
for (const kind of order) {
  const k = kinds.get(kind)
  if (!k) continue
  total += k.total; passed += k.passed
  console.log(`${kind}: ${k.passed} of ${k.total}`)
}
console.log(`total: ${passed} of ${total}`)
for (const kind of order) {
  const k = kinds.get(kind)
  if (!k || k.failing.length === 0) continue
  console.log(`\n== ${kind}: ${k.failing.length} not passed`)
  for (const f of k.failing) {
    const deps = f.verdict === 'dependency_fail' && f.deps ? ` (depends on ${f.deps.join(', ')})` : ''
    console.log(`- ${f.id} [${f.verdict}]${deps}: ${f.name}\n    ${f.suite} | ${f.msg}`)
  }
}
EOF
