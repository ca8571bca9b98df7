"""The package as published: a wheel (``$PRICEWIRE_PY_WHEEL``, built by run-conformance;
else built here with ``pip wheel``) installs into a fresh virtualenv without the system's
site packages and without an index, carries its metadata (version from
``pricewire_client.__version__``, the Apache-2.0 licence, the typing marker, the asyncio
package), and its ``pricewire-client watch`` prints prices from the real server."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import Feeder
from server import Server

HERE = Path(__file__).resolve().parents[1]
STEP_TIMEOUT_S = 300

METADATA_CHECK = """
import importlib.metadata as md, importlib.resources as res, pricewire_client, pricewire_client.aio
meta = md.metadata("pricewire-client")
assert meta["Version"] == pricewire_client.__version__ == "0.3.0", meta["Version"]
assert meta["License-Expression"] == "Apache-2.0", meta["License-Expression"]
assert "Typing :: Typed" in meta.get_all("Classifier"), meta.get_all("Classifier")
assert (res.files("pricewire_client") / "py.typed").is_file()
files = {str(f) for f in md.files("pricewire-client")}
assert any(f.endswith("licenses/LICENSE") for f in files), sorted(files)
assert not any("tests" in f or "scripts" in f for f in files), sorted(files)
print(pricewire_client.__file__)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel under test."""
    given = os.environ.get("PRICEWIRE_PY_WHEEL")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(HERE)]
    subprocess.run(cmd, check=True, timeout=STEP_TIMEOUT_S)
    (built,) = out.glob("pricewire_client-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv (no system site packages) with only the wheel installed."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=True, system_site_packages=False)
    py = root / "bin" / "python"
    install = [str(py), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", str(wheel)]
    subprocess.run(install, check=True, timeout=STEP_TIMEOUT_S, cwd=root)
    return root


def test_the_wheel_carries_its_metadata(fresh_venv: Path) -> None:
    py = fresh_venv / "bin" / "python"
    out = subprocess.run([str(py), "-P", "-c", METADATA_CHECK], capture_output=True, text=True,
                         timeout=60, cwd=fresh_venv)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert str(fresh_venv) in out.stdout, "imported from the fresh virtualenv"


def test_the_installed_watch_prints_prices(
    fresh_venv: Path, server: Server, feeder: Feeder
) -> None:
    script = fresh_venv / "bin" / "pricewire-client"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [str(script), "watch", "--port", str(server.port), "--count", "3", "--seconds", "15",
         "EURUSD"],
        capture_output=True, text=True, timeout=60, cwd=fresh_venv, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    prices = [line.split() for line in out.stdout.splitlines() if " EURUSD " in line]
    assert len(prices) == 3 and prices[0][7] == "snap", out.stdout
