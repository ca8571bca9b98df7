"""Start and stop the real pricewire binary for the conformance suite.

The binary is ``$PRICEWIRE_BIN`` or ``target/debug/pricewire`` under the repository root
(built with ``cargo build`` when missing). Each server listens on free 127.0.0.1 ports and
is stopped with SIGTERM, then SIGKILL after a bounded wait. Readiness is polled on
``/readyz`` with a deadline, never slept for.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0

# Accounts of the test configuration. `demo` sees every symbol and tier (standard is its
# default, as in the built-in account); `narrow` sees two symbols at one tier and holds at
# most one session; `nomd` has no market-data entitlement.
CONFIG_TOML = """
# Clear tokens: a loopback test (docs/security.md).
insecure_plain_tokens = true
[[accounts]]
name = "demo"
token = "demo"
symbols = ["*"]
tiers = ["standard", "raw", "retail"]

[[accounts]]
name = "narrow"
token = "n1"
symbols = ["EURUSD", "GBPUSD"]
tiers = ["retail"]
max_sessions = 1

[[accounts]]
name = "nomd"
token = "n2"
symbols = []
tiers = ["retail"]
"""

# One account per flooding test and client API (tests/test_bad_input.py): a
# Disconnect(message_flood) holds the account's logons from the address for its
# retry-after (docs/security.md), so a flood on "demo" would refuse every later demo
# logon from 127.0.0.1. Each account's token is its name.
FLOOD_ACCOUNTS = [f"flood{n}-{api}" for n in (1, 2, 3) for api in ("sync", "aio")]
CONFIG_TOML += "".join(
    f'\n[[accounts]]\nname = "{a}"\ntoken = "{a}"\nsymbols = ["*"]\ntiers = ["standard"]\n'
    for a in FLOOD_ACCOUNTS
)


class PortTaken(RuntimeError):
    """The server exited because a port it was given was taken meanwhile."""


# Fresh ports a start tries after a port it picked was taken.
PORT_RETRIES = 3


def binary() -> Path:
    """The server binary, built with cargo if the default path is missing."""
    env = os.environ.get("PRICEWIRE_BIN")
    if env:
        return Path(env)
    path = REPO_ROOT / "target" / "debug" / "pricewire"
    if not path.exists():
        subprocess.run(["cargo", "build"], cwd=REPO_ROOT, check=True, timeout=1800)
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """One running pricewire process with a subscriber, ingest and ops port."""

    def __init__(
        self,
        tmp: Path,
        extra: list[str] | None = None,
        drain_delay_ms: int = 0,
        role: str = "standalone",
        bus: str | None = None,
        port: int | None = None,
    ) -> None:
        """Start and wait until ready. ``role`` ``core`` or ``edge`` runs on the NATS
        ``bus`` (an edge has no ingest port: ``feed_port`` is 0); ``port`` reuses a
        subscriber port (a server coming back where it was). Ports this picked are
        picked again when one was taken before the server bound it (another
        server of the run; seen once in a fresh-clone CI)."""
        for attempt in range(PORT_RETRIES + 1):
            try:
                self._start(tmp, extra, drain_delay_ms, role, bus, port)
                return
            except PortTaken:
                self.log.close()
                if attempt == PORT_RETRIES:
                    raise

    def _start(
        self,
        tmp: Path,
        extra: list[str] | None,
        drain_delay_ms: int,
        role: str,
        bus: str | None,
        port: int | None,
    ) -> None:
        self.port = port or free_port()
        self.feed_port = free_port() if role != "edge" else 0
        self.ops_port = free_port()
        config = tmp / f"pricewire-{self.port}-{self.ops_port}.toml"
        config.write_text(CONFIG_TOML)
        self.terminated = False
        self.log_path = tmp / f"pricewire-{self.port}-{self.ops_port}.log"
        args = [
            str(binary()), "serve", "--no-synthetic", "--config", str(config),
            "--listen", f"127.0.0.1:{self.port}",
            "--ops-listen", f"127.0.0.1:{self.ops_port}",
            "--drain-delay-ms", str(drain_delay_ms),
            "--grace-ms", str(drain_delay_ms + 3000),
            "--report-interval-ms", "60000",
        ]  # fmt: skip
        if self.feed_port:
            args += ["--feed-listen", f"127.0.0.1:{self.feed_port}"]
        if bus is not None:
            args += ["--role", role, "--bus", bus]
        args += extra or []
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        atexit.register(self.kill_if_running)  # an interrupted run leaves no server behind
        self.wait_ready()

    def http(self, path: str) -> tuple[int, str]:
        """GET an ops path: (status, body)."""
        url = f"http://127.0.0.1:{self.ops_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, ""

    def wait_ready(self) -> None:
        """Poll /readyz until 200, the process exits, or the deadline passes."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.log_path.read_text()[-2000:]
                if "Address already in use" in log:
                    raise PortTaken(f"pricewire exited: {log}")
                raise RuntimeError(f"pricewire exited: {log}")
            try:
                if self.http("/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)  # polling interval of a bounded wait, not a synchronisation
        self.stop()
        raise RuntimeError("pricewire not ready in time")

    def metric(self, name_prefix: str) -> float:
        """Sum of every sample whose series starts with ``name_prefix``."""
        total = 0.0
        for line in self.http("/metrics")[1].splitlines():
            if line.startswith(name_prefix):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def signal_term(self) -> None:
        """Send SIGTERM (starts the graceful shutdown)."""
        if self.proc.poll() is None and not self.terminated:
            self.terminated = True  # a second SIGTERM would exit at once with 130
            self.proc.send_signal(signal.SIGTERM)

    def kill_if_running(self) -> None:
        """SIGKILL the process if it still runs (last resort at interpreter exit)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)

    def crash(self) -> None:
        """SIGKILL now, as in a crash (no Disconnect, no drain), and reap the process."""
        self.kill_if_running()
        self.log.close()

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if still running after the bounded wait; the exit code."""
        self.signal_term()
        try:
            code = self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(STOP_TIMEOUT_S)
        self.log.close()
        return code
