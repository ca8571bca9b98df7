"""A real ``nats-server`` with JetStream on free 127.0.0.1 ports, for the core/edge tests.

The binary comes from Debian's ``nats-server`` package (``.ci/run`` installs it); a test
that needs it fails with that instruction when it is missing. Start-up is awaited on the
node's monitoring endpoint ``/healthz`` answering 200, bounded by ``START_TIMEOUT_S``.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from server import free_port

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class NatsServer:
    """One nats-server process with JetStream, its store under ``tmp``; killed by stop()."""

    def __init__(self, tmp: Path) -> None:
        binary = shutil.which("nats-server")
        if binary is None:
            raise RuntimeError(
                "nats-server is not installed: `apt-get install -y nats-server` "
                "(Debian's package; .ci/run installs it)"
            )
        self.port = free_port()
        self.monitor_port = free_port()
        store = tmp / f"nats-{self.port}"
        store.mkdir()
        self.log_path = tmp / f"nats-{self.port}.log"
        self.log = open(self.log_path, "wb")
        args = [
            binary, "-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.monitor_port),
            "-n", f"pw-py-{self.port}", "-js", "-sd", str(store),
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        atexit.register(self.stop)  # an interrupted run leaves no node behind
        self.wait_healthy()

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:PORT``, as ``pricewire serve --bus`` takes it."""
        return f"nats://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        """Whether /healthz answers 200."""
        url = f"http://127.0.0.1:{self.monitor_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def wait_healthy(self) -> None:
        """Poll /healthz until 200, the process exits, or the deadline passes."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited: {self.log_path.read_text()[-2000:]}")
            if self.healthy():
                return
            time.sleep(0.05)  # polling interval of a bounded wait, not a synchronisation
        self.stop()
        raise RuntimeError("nats-server not healthy in time")

    def stop(self) -> None:
        """Kill the node (idempotent)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)
        self.log.close()
