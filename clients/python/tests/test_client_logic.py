"""The client's own behaviour against a scripted peer on 127.0.0.1 (no pricewire server):
a sequence gap triggers a critical SnapshotRequest whose answer resyncs the tracker, and
the session heartbeats when idle."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from pricewire_client import FrameReader, Message, Session, decode, encode

PRICE = {"symbolId": 4, "tier": 2, "digits": 5, "bid": 100, "ask": 110}


@pytest.fixture
def pair() -> Iterator[tuple[Session, socket.socket]]:
    """A Session connected to a scripted peer socket."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        sess = Session("127.0.0.1", listener.getsockname()[1])
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
    pair: tuple[Session, socket.socket],
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
    outcomes = []
    for _ in range(3):
        msg = sess.recv(2)
        assert msg is not None
        if msg.name == "PriceUpdate":
            outcomes.append(sess.tracker.expected[(4, 2)])
    assert outcomes == [17, 18]  # 15 ignored as older than the resync, 17 accepted
    assert sess.tracker.old == 1 and len(sess.tracker.gaps) == 1


def test_idle_session_sends_heartbeats(pair: tuple[Session, socket.socket]) -> None:
    sess, peer = pair
    sess.heartbeat_ms = 100
    sess.recv(0.35)  # idle: nothing to read, so the session heartbeats meanwhile
    reader = FrameReader()
    assert read_message(peer, reader).name == "Heartbeat"
