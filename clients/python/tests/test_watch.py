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


def run_watch(
    server: Server, extra: list[str], token_env: str | None
) -> subprocess.CompletedProcess[str]:
    """``watch EURUSD`` for two prices with ``extra`` flags and PRICEWIRE_TOKEN=token_env."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PACKAGE_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PRICEWIRE_TOKEN", None)
    if token_env is not None:
        env["PRICEWIRE_TOKEN"] = token_env
    return subprocess.run(
        [sys.executable, "-m", "pricewire_client", "watch", "--port", str(server.port),
         "--count", "2", "--seconds", "10", "--max-reconnects", "0", *extra, "EURUSD"],
        capture_output=True, text=True, timeout=20, env=env,
    )  # fmt: skip


def test_watch_takes_the_token_off_the_command_line(
    server: Server, feeder: Feeder, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("demo\n")
    token_file.chmod(0o600)
    out = run_watch(server, ["--token-file", str(token_file)], None)
    assert out.returncode == 0, out.stderr
    assert sum(" EURUSD " in line for line in out.stdout.splitlines()) == 2, out.stdout
    assert run_watch(server, [], "demo").returncode == 0
    wrong = run_watch(server, [], "Env-wrong-token-3b")
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    typed = run_watch(server, ["--token", "Typed-wrong-token-4c"], None)
    assert typed.returncode == 1
    assert "warning: --token puts the secret in the process list" in typed.stderr
    assert "Typed-wrong-token" not in typed.stderr + typed.stdout
    missing = run_watch(server, ["--token-file", str(tmp_path / "none")], None)
    assert missing.returncode == 2 and "none" in missing.stderr, missing.stderr
    empty = run_watch(server, [], "")
    assert empty.returncode == 2 and "PRICEWIRE_TOKEN: set but empty" in empty.stderr
