"""What every bench/ script needs: where the repository and our binaries are, a free
loopback port, waiting for a server to listen, and reading its JSON endpoints.

The scripts run as `python3 bench/<name>.py`, so this directory is on their import path.
"""

import json
import os
import socket
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


def get_json(port, path, timeout=10):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return json.loads(r.read())
