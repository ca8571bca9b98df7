"""The client's own behaviour against a scripted peer on 127.0.0.1 (no pricewire server),
for both APIs: a sequence gap triggers a critical SnapshotRequest whose answer resyncs the
tracker, and the session heartbeats when idle."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from pricewire_client import FrameReader, Message, Price, decode, encode

from helpers import Sess, new_session

PRICE = {"symbolId": 4, "tier": 2, "digits": 5, "bid": 100, "ask": 110}


@pytest.fixture
def pair(api: str) -> Iterator[tuple[Sess, socket.socket]]:
    """A session of the API under test connected to a scripted peer socket."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        sess = new_session("127.0.0.1", listener.getsockname()[1])
        peer, _ = listener.accept()
    peer.settimeout(3)
    yield sess, peer
    sess.close()
    peer.close()


def read_message(peer: socket.socket, reader: FrameReader) -> Message:
    """The next message the session sent to the peer."""
    while (frame := reader.next_frame()) is None:
        data = peer.recv(4096)
        assert data, "session closed"
        reader.feed(data)
    return decode(frame)


def price(name: str, seq: int) -> bytes:
    return encode(Message(name, dict(PRICE, seq=seq)))


def test_gap_sends_a_critical_snapshot_request_and_resyncs(
    pair: tuple[Sess, socket.socket],
) -> None:
    sess, peer = pair
    peer.sendall(price("PriceSnapshot", 10) + price("PriceUpdate", 11) + price("PriceUpdate", 14))
    kinds = [sess.recv(2) for _ in range(3)]
    assert [m.name for m in kinds if m] == ["PriceSnapshot", "PriceUpdate", "PriceUpdate"]
    assert sess.tracker.gaps == [(4, 2, 12, 14)]
    req = read_message(peer, FrameReader())
    assert req.name == "SnapshotRequest" and req.int("critical") == 1
    assert req.int("tier") == 2 and req.groups["symbols"] == [{"symbolId": 4}]
    answer = Message(
        "SnapshotResponse",
        {"requestId": req.int("requestId")},
        {"prices": [dict(PRICE, seq=16, flags=0, providers=1)]},
    )
    peer.sendall(encode(answer) + price("PriceUpdate", 15) + price("PriceUpdate", 17))
    got = [sess.recv(2) for _ in range(3)]
    assert got[0] is not None and got[0].name == "SnapshotResponse"  # handed on, too
    statuses = [m.status for m in got if isinstance(m, Price)]
    assert statuses == ["old", "ok"]  # 15 older than the resync, 17 its next
    tracker = sess.tracker
    assert tracker.expected[(4, 2)] == 18
    assert tracker.old == 1 and len(tracker.gaps) == 1


def test_idle_session_sends_heartbeats(pair: tuple[Sess, socket.socket]) -> None:
    sess, peer = pair
    sess.heartbeat_ms = 100
    sess.recv(0.35)  # idle: nothing to read, so the session heartbeats meanwhile
    reader = FrameReader()
    assert read_message(peer, reader).name == "Heartbeat"
