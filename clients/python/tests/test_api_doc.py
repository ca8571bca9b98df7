"""API.md is what the docstrings say: ``scripts/api_doc.py --check`` against the
installed package (edit the docstrings, then run ``python scripts/api_doc.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "api_doc.py"


def test_api_reference_is_current() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
