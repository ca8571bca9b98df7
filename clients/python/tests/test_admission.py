"""Conformance of admission refusals (protocol.md §4.1 LogonRejectReason, §4.2): a server at
its connection capacity refuses with reason busy and a jittered retry floor."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pricewire_client import DisconnectReason, LogonRefused, LogonRejectReason, Session

from helpers import connect, until_closed
from server import Server


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that takes two connections per client address."""
    srv = Server(Path(tmp_path_factory.mktemp("admission")), ["--ip-connections-max", "2"])
    yield srv
    srv.stop()


def third_logon(srv: Server) -> LogonRefused:
    held = [connect(srv) for _ in range(2)]
    for sess in held:
        sess.logon()
    with pytest.raises(LogonRefused) as err:
        extra = Session("127.0.0.1", srv.port)
        extra.logon()
    until_closed(extra)
    for sess in held:
        sess.logout()
        until_closed(sess)
    return err.value


def test_connection_capacity_refuses_busy_with_a_floor(small_server: Server) -> None:
    answer = third_logon(small_server).answer
    assert answer.int("reason") in (LogonRejectReason.BUSY, DisconnectReason.BUSY)
    assert answer.int("retryAfterMs") > 0


@pytest.mark.xfail(
    strict=True, reason="not in #17: capacity is Disconnect(busy), not LogonRejected"
)
def test_connection_capacity_is_logon_rejected_busy(small_server: Server) -> None:
    answer = third_logon(small_server).answer
    assert answer.name == "LogonRejected" and answer.int("reason") == LogonRejectReason.BUSY
