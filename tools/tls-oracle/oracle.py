"""tlslite-ng, an independent TLS implementation, against the real pricewire binary.

For each threading (shared, dedicated) a server is started with TLS on both listeners
(`serve --tls-cert/--tls-key`); every conversation runs on the subscriber port and on the
ingest port. After each one: the process is alive, /livez answers 200, and a TLS
subscriber logged on from the start is still receiving prices with no gap.

    PRICEWIRE_BIN=target/debug/pricewire python3 tools/tls-oracle/oracle.py [-k substring]

Prints one line per conversation and ends with 'N passed, N failed'; exit 1 on a failure.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "clients" / "python"))
sys.path.insert(0, str(HERE))

from pricewire_client import Session  # noqa: E402

import conv  # noqa: E402

WAIT_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_cert(tmp: Path) -> tuple[Path, Path]:
    """A self-signed RSA leaf for 127.0.0.1 (tlslite-ng does not check it)."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", "key.pem", "-out", "cert.pem", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        cwd=tmp, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    os.chmod(tmp / "key.pem", 0o600)
    return tmp / "cert.pem", tmp / "key.pem"


class Server:
    """`pricewire serve` with TLS on both listeners."""

    def __init__(self, binary: str, tmp: Path, threading_: str) -> None:
        cert, key = make_cert(tmp)
        self.port, self.feed, self.ops = free_port(), free_port(), free_port()
        self.log = open(tmp / f"server-{threading_}.log", "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", "--synthetic-rate", "500", "--shards", "1",
             "--threading", threading_, "--report-interval-ms", "60000",
             "--drain-delay-ms", "0", "--listen", f"127.0.0.1:{self.port}",
             "--feed-listen", f"127.0.0.1:{self.feed}", "--ops-listen", f"127.0.0.1:{self.ops}",
             "--tls-cert", str(cert), "--tls-key", str(key)],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"},
        )  # fmt: skip
        self.wait("ready", lambda: self.status("/readyz") == 200)

    def status(self, path: str) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ops}{path}", timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as err:
            return err.code
        except OSError:
            return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, what: str, cond) -> None:
        deadline = time.monotonic() + WAIT_S
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting: {what}")
            time.sleep(0.02)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


class Watcher(threading.Thread):
    """A TLS subscriber logged on throughout: counts prices, gaps and disconnects."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        self.sess = Session("127.0.0.1", port, tls=ctx)
        self.sess.logon()
        assert self.sess.subscribe([0, 1, 2]).name == "SubscribeResponse"
        self.prices, self.lost, self.stopping = 0, "", False

    def run(self) -> None:
        try:
            while not self.stopping:
                msg = self.sess.recv(0.2)
                if msg is not None and msg.name in ("PriceUpdate", "PriceSnapshot"):
                    self.prices += 1
                elif msg is not None and msg.name == "Disconnect":
                    self.lost = "Disconnect"
                    return
        except Exception as err:
            self.lost = repr(err)

    @property
    def gaps(self) -> int:
        return len(self.sess.tracker.gaps)


def healthy(server: Server, watcher: Watcher) -> None:
    """The checks after every conversation."""
    assert server.alive(), "the process died"
    assert server.status("/livez") == 200, "/livez is not 200"
    seen = watcher.prices
    server.wait("the watcher's next prices", lambda: watcher.prices > seen or watcher.lost)
    assert not watcher.lost, f"the watcher lost its session: {watcher.lost}"
    assert watcher.gaps == 0, f"the watcher saw gaps: {watcher.sess.tracker.gaps[:3]}"


def run_all(binary: str, only: str, tmp: Path) -> tuple[int, int]:
    convs = {**conv.raw_conversations(), **conv.tls_conversations()}
    convs = {k: v for k, v in convs.items() if only in k}
    passed = failed = 0
    for mode in ("shared", "dedicated"):
        server = Server(binary, tmp, mode)
        watcher = Watcher(server.port)
        watcher.start()
        try:
            for port, kind in ((server.port, "subscriber"), (server.feed, "feed")):
                target = conv.Target(port, kind)
                for name, run in convs.items():
                    label = f"[{mode} {kind}] {name}"
                    try:
                        got = run(target)
                        healthy(server, watcher)
                        print(f"ok    {label}: {got}", flush=True)
                        passed += 1
                    except Exception as err:
                        failed += 1
                        print(f"FAIL  {label}: {err!r}", flush=True)
                        if not isinstance(err, AssertionError):
                            traceback.print_exc(limit=3)
                        if not server.alive():
                            raise SystemExit(f"server died; log in {server.log.name}") from err
        finally:
            watcher.stopping = True
            server.stop()
        print(f"{mode}: watcher saw {watcher.prices} prices, {watcher.gaps} gaps", flush=True)
    return passed, failed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", default="", help="run conversations whose name holds this")
    args = ap.parse_args()
    binary = os.environ.get("PRICEWIRE_BIN", str(REPO / "target" / "debug" / "pricewire"))
    with tempfile.TemporaryDirectory() as tmp:
        passed, failed = run_all(binary, args.k, Path(tmp))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
