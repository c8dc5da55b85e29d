#!/usr/bin/env bash
# Builds the .deb and proves it installs and starts on a clean Debian: a fresh
# debootstrap chroot (bookworm, minbase), `dpkg -i` of the package (its postinst makes the
# user and the directories), `edgecache -t` on the packaged config, then the server
# started as the service would start it (as user edgecache, the unit's command line),
# asked for /health and /status, and stopped gracefully (`-s quit`, the unit's
# KillSignal): it must exit 0. systemd itself does not run in a chroot: the unit file is
# checked with `systemd-analyze verify` against the chroot (which has systemd installed,
# for the units it names), and that check must pass.
#
# Needs root, network access to a Debian mirror (or DEBIAN_MIRROR), and cargo-deb
# (`cargo install cargo-deb`). About 3 minutes. Usage: sudo packaging/test-deb.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ROOT="${CHROOT:-/tmp/edgecache-deb-chroot}"

command -v cargo-deb >/dev/null || { echo "cargo-deb missing: cargo install cargo-deb" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y -q debootstrap
cargo deb -p edgecache
DEB="$(ls -t target/debian/edgecache_*.deb | head -1)"
echo "== built $DEB"
dpkg-deb --info "$DEB" | sed -n '1,20p'
dpkg-deb --contents "$DEB"

# Runs on every exit, a failed check's included; it checks nothing itself, so each step
# is guarded instead of failing.
cleanup() {
    local pidfile="$ROOT/run/edgecache/edgecache.pid" pid
    if [ -s "$pidfile" ]; then
        pid="$(cat "$pidfile")"
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
        fi
    fi
    if mountpoint -q "$ROOT/proc"; then
        umount "$ROOT/proc"
    fi
}
trap cleanup EXIT
if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
    rm -rf "$ROOT"
    debootstrap --variant=minbase --include=adduser,curl,ca-certificates,systemd bookworm "$ROOT" "$MIRROR"
fi
mount -t proc proc "$ROOT/proc"
if [ ! -e "$ROOT/lib/systemd/system/multi-user.target" ]; then
    # A chroot made before systemd was in the list above.
    chroot "$ROOT" apt-get install -y -q systemd
fi
cp "$DEB" "$ROOT/tmp/"
chroot "$ROOT" dpkg -i "/tmp/$(basename "$DEB")"
echo "== installed: user, directories, conffile"
chroot "$ROOT" id edgecache
chroot "$ROOT" ls -ld /var/cache/edgecache /var/log/edgecache /etc/edgecache/edgecache.toml
chroot "$ROOT" /usr/bin/edgecache -t -c /etc/edgecache/edgecache.toml
mkdir -p "$ROOT/run/edgecache" && chroot "$ROOT" chown edgecache:edgecache /run/edgecache
# The unit's ExecStart, as its User=.
chroot "$ROOT" runuser -u edgecache -- /usr/bin/edgecache -c /etc/edgecache/edgecache.toml &
SERVER=$!
for _ in $(seq 1 50); do
    if chroot "$ROOT" curl -fsS http://127.0.0.1:8080/health 2>/dev/null; then break; fi
    sleep 0.2
done
chroot "$ROOT" curl -fsS http://127.0.0.1:8080/health
STATUS="$(chroot "$ROOT" curl -fsS http://127.0.0.1:9090/status)"
sed -n '1,8p' <<<"$STATUS"
grep -q '"worker_connections"' <<<"$STATUS"
echo "== the unit file"
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify --root="$ROOT" /lib/systemd/system/edgecache.service
else
    chroot "$ROOT" systemd-analyze verify /lib/systemd/system/edgecache.service
fi
grep -qx 'KillSignal=SIGQUIT' "$ROOT/lib/systemd/system/edgecache.service"
echo "== a graceful stop, as systemctl stop does it (SIGQUIT)"
chroot "$ROOT" /usr/bin/edgecache -s quit -c /etc/edgecache/edgecache.toml
wait "$SERVER"
echo "== the package installs, the service starts and stops with exit 0"
