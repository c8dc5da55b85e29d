#!/usr/bin/env bash
# Builds the fuzz targets with the coverage flags cargo-fuzz uses (no cargo-fuzz needed,
# only a nightly toolchain) and runs one of them: fuzz/run.sh <target> [seconds].
set -euo pipefail
cd "$(dirname "$0")"
target="${1:?usage: fuzz/run.sh parse_request|parse_response|body_decoder|cache_meta_decode|load_response|range|cache_policy|compress|config|purge|cache_snapshot|h2_request_head|h2_response_head|h3_request_head|h3_response_head|proxy_protocol|real_ip|cache_key_normalize|uri_normalize|secure_link|cidr_geo|quic_steer [seconds]}"
secs="${2:-60}"
triple="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
cargo +nightly build --release --target "$triple" --bin "$target"
mkdir -p "corpus/$target" artifacts
exec "target/$triple/release/$target" -max_total_time="$secs" -artifact_prefix=artifacts/ "corpus/$target"
