"""Conformance of admission refusals (protocol.md §4.1 LogonRejectReason, §4.2): a server at
its connection capacity refuses with reason busy and a jittered retry floor."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pricewire_client import DisconnectReason, LogonRefused

from helpers import connect, until_closed
from server import Server

pytestmark = pytest.mark.usefixtures("api")


@pytest.fixture
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that takes two connections per client address (one per test: the count of
    a connection just closed by the server may not have dropped yet)."""
    srv = Server(Path(tmp_path_factory.mktemp("admission")), ["--ip-connections-max", "2"])
    yield srv
    srv.stop()


def third_logon(srv: Server) -> LogonRefused:
    held = [connect(srv) for _ in range(2)]
    for sess in held:
        sess.logon()
    with pytest.raises(LogonRefused) as err:
        extra = connect(srv)
        extra.logon()
    until_closed(extra)
    for sess in held:
        sess.logout()
        until_closed(sess)
    return err.value


def test_connection_capacity_refuses_busy_with_a_floor(small_server: Server) -> None:
    """§3 DisconnectReason busy: a full connection capacity is refused at accept with
    Disconnect(busy) and a retry floor, before any Logon is answered (LogonRejected(busy)
    is for logons the server cannot take)."""
    err = third_logon(small_server)
    assert err.answer.name == "Disconnect" and err.answer.reason == DisconnectReason.BUSY
    assert err.reason == "busy" and err.retry_after > 0
