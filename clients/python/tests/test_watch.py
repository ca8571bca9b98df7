"""``python -m pricewire_client watch`` against the real server: prints EURUSD prices with
their flags and exits 0 once ``--count`` prices were shown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pricewire_client

from conftest import Feeder
from server import Server

# The directory holding the package this test process imports (installed or source), so
# the subprocess runs the same copy.
PACKAGE_DIR = Path(pricewire_client.__file__).resolve().parents[1]


def test_watch_prints_prices_with_flags(server: Server, feeder: Feeder) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PACKAGE_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-m", "pricewire_client", "watch", "--port", str(server.port),
         "--count", "5", "--seconds", "10", "EURUSD", "NOPE"],
        capture_output=True, text=True, timeout=20, env=env,
    )  # fmt: skip
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
