"""Conformance of the server's shutdown as a subscriber sees it (protocol.md §4.1 and §4.2):
SIGTERM ends every session with Disconnect(shutdown) and a jittered retry floor."""

from __future__ import annotations

from pathlib import Path

import pytest

from pricewire_client import DisconnectReason

from helpers import logged_on, until_closed
from server import Server

pytestmark = pytest.mark.usefixtures("api")


def test_sigterm_disconnects_subscribers_with_shutdown(tmp_path: Path) -> None:
    srv = Server(tmp_path)
    try:
        sessions = [logged_on(srv) for _ in range(3)]
        srv.signal_term()
        floors = []
        for sess in sessions:
            seen = until_closed(sess, timeout_s=8)
            disc = [m for m in seen if m.name == "Disconnect"]
            assert disc and disc[-1].reason == DisconnectReason.SHUTDOWN, seen
            floors.append(disc[-1].retry_after_ms)
        assert all(1_000 <= f <= 10_000 for f in floors), floors  # §4.2: a floor...
        assert len(set(floors)) > 1, floors  # ...jittered per session
    finally:
        code = srv.stop()
    assert code == 0
