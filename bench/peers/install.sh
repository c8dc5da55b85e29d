#!/usr/bin/env bash
# Installs the peer servers and tools that edgebench compares edgecache with, from
# Debian's packages. Needs root. A package that fails to install is reported and
# skipped: edgebench says which peers are missing and runs the others.
#
# The packages' system services are stopped and disabled right after install: edgebench
# runs every peer as a foreground process in a temp dir on a free loopback port, and a
# system nginx/varnish/trafficserver holding ports 80/6081/8080 would only add noise.
set -uo pipefail

PACKAGES=(nginx varnish trafficserver wrk fio)
SERVICES=(nginx varnish varnishncsa trafficserver)

if [ "$(id -u)" -ne 0 ]; then
    echo "install.sh: must run as root (apt-get install)" >&2
    exit 2
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -q -o DPkg::Lock::Timeout=600 || echo "install.sh: apt-get update failed; trying with the current lists" >&2

failed=()
for p in "${PACKAGES[@]}"; do
    if apt-get install -y -q -o DPkg::Lock::Timeout=600 "$p"; then
        echo "install.sh: $p installed"
    else
        echo "install.sh: $p FAILED to install; edgebench will report it missing" >&2
        failed+=("$p")
    fi
done

# Not system services: stop them if the package started them (no systemd is fine).
for s in "${SERVICES[@]}"; do
    if command -v systemctl >/dev/null 2>&1 && systemctl list-unit-files "$s.service" >/dev/null 2>&1; then
        systemctl stop "$s" >/dev/null 2>&1 || true
        systemctl disable "$s" >/dev/null 2>&1 || true
    fi
    if command -v service >/dev/null 2>&1; then
        service "$s" stop >/dev/null 2>&1 || true
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "install.sh: not installed: ${failed[*]}" >&2
fi
exit 0
