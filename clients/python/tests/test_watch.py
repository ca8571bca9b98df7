"""``python -m pricewire_client watch`` against the real server: prints EURUSD prices with
their flags and exits 0 once ``--count`` prices were shown; with ``--connect`` it moves past
a dead first address to the next one at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pricewire_client

from conftest import Feeder
from server import Server, free_port

# The directory holding the package this test process imports (installed or source), so
# the subprocess runs the same copy.
PACKAGE_DIR = Path(pricewire_client.__file__).resolve().parents[1]


def watch(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pricewire_client watch ARGS`` to its end (bounded)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PACKAGE_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "pricewire_client", "watch", *args],
        capture_output=True, text=True, timeout=20, env=env,
    )  # fmt: skip


def test_watch_prints_prices_with_flags(server: Server, feeder: Feeder) -> None:
    out = watch("--port", str(server.port), "--count", "5", "--seconds", "10", "EURUSD", "NOPE")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "# NOPE: unknown_symbol" in lines
    prices = [line.split() for line in lines if " EURUSD " in line]
    assert len(prices) == 5, out.stdout
    assert [p[7] for p in prices[:2]] == ["snap", "upd"]  # the subscription's snapshot first
    assert all(float(p[5]) < float(p[6]) for p in prices), out.stdout  # bid < ask, decimals
    assert all("single_provider" in p[8] for p in prices), out.stdout
    seqs = [int(p[4]) for p in prices]
    assert seqs == list(range(seqs[0], seqs[0] + 5)), out.stdout


def test_watch_connect_moves_past_a_dead_first_address(server: Server, feeder: Feeder) -> None:
    dead = free_port()  # bound a moment ago, nothing listens: the connect is refused
    connect = f"127.0.0.1:{dead},127.0.0.1:{server.port}"
    out = watch("--connect", connect, "--count", "3", "--seconds", "10", "EURUSD")
    assert out.returncode == 0, out.stdout + out.stderr
    notes = [line for line in out.stdout.splitlines() if line.startswith("#")]
    assert notes[0].startswith(f"# disconnected: connect to ('127.0.0.1', {dead}) failed")
    assert notes[0].endswith("next attempt in 0.000 s"), "the first round does not wait"
    assert notes[1] == f"# logged on at 127.0.0.1:{server.port}"
    prices = [line.split() for line in out.stdout.splitlines() if " EURUSD " in line]
    assert len(prices) == 3 and prices[0][7] == "snap", out.stdout
