"""Stream identity (schema version 3): ``streamId`` on LogonAccepted (offset 21, block 29)
and PriceSnapshot (offset 62, block 70) decodes by the blockLength rule of §2, version 2
frames without it still decode (stream id 0), and a new stream id is a resync, never a
resume. Hand-built frames, the tracker over seeded histories, a Subscriber moving between
scripted servers, and the real binary restarted under a terminal of either API."""

from __future__ import annotations

import random
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from test_reconnect import A, B, FakeClock, Peers, subscriber

from pricewire_client import (
    Backoff,
    ConnectionLost,
    LogonAccepted,
    MalformedError,
    Message,
    Price,
    PriceStatus,
    ProviderSession,
    Quote,
    ReconnectPolicy,
    SeqTracker,
    Subscriber,
    decode,
    encode,
)
from pricewire_client.codec import raw_frame
from pricewire_client.core import SessionCore
from pricewire_client.model import from_message

from aio_bridge import AioSubscriber
from helpers import release
from server import Server

STREAM = 0x1122334455667788


def logon_accepted_body(stream: int | None) -> bytes:
    body = struct.pack("<QIQB", 7, 1000, 123, 1)
    return body if stream is None else body + struct.pack("<Q", stream)


def price_body(seq: int, stream: int | None) -> bytes:
    body = struct.pack("<HBBBBQqqQQQQ", 0, 0, 0, 5, 1, seq, 108_001, 108_011, 1, 1, 0, 0)
    return body if stream is None else body + struct.pack("<Q", stream)


def test_logon_accepted_of_version_3_carries_the_stream_id() -> None:
    msg = decode(raw_frame(2, logon_accepted_body(STREAM), 29, version=3))
    assert msg.fields["streamId"] == STREAM and msg.block_length == 29
    acc = from_message(msg)
    assert isinstance(acc, LogonAccepted) and acc.stream_id == STREAM and acc.default_tier == 1


def test_version_2_frames_decode_without_a_stream_id() -> None:
    msg = decode(raw_frame(2, logon_accepted_body(None), 21, version=2))
    assert "streamId" not in msg.fields
    assert from_message(msg).stream_id == 0  # type: ignore[union-attr]
    snap = decode(raw_frame(15, price_body(5, None), 62, version=2))
    assert "streamId" not in snap.fields and from_message(snap).stream_id == 0  # type: ignore[union-attr]


def test_the_block_length_says_whether_the_stream_id_is_there() -> None:
    """§2: a root block that ends before a later version's field comes from an earlier
    sender; the field is absent and reads as 0. Only a block shorter than the first
    version's is malformed."""
    assert "streamId" not in decode(raw_frame(2, logon_accepted_body(None), 21, version=3)).fields
    assert from_message(decode(raw_frame(15, price_body(5, None), 62, version=3))).stream_id == 0  # type: ignore[union-attr]
    long_v2 = decode(raw_frame(2, logon_accepted_body(STREAM), 29, version=2))
    assert long_v2.fields["streamId"] == STREAM
    with pytest.raises(MalformedError):
        decode(raw_frame(2, logon_accepted_body(None)[:20], 20, version=3))
    with pytest.raises(MalformedError):
        decode(raw_frame(15, price_body(5, None)[:61], 61, version=3))


def test_a_newer_version_with_a_longer_block_keeps_the_stream_id() -> None:
    body = price_body(5, STREAM) + b"\xee" * 8
    snap = decode(raw_frame(15, body, 78, version=4))
    assert snap.fields["streamId"] == STREAM
    core = SessionCore()
    core.receive(raw_frame(15, body, 78, version=4), 0.0)
    price = core.pop()
    assert isinstance(price, Price) and price.stream_id == STREAM and price.seq == 5


def test_price_update_is_unchanged_and_takes_its_keys_stream() -> None:
    """§5: an update belongs to the stream of its key's last snapshot on the session."""
    core = SessionCore()
    core.start_logon(Message("Logon"), 0.0)
    core.receive(raw_frame(2, logon_accepted_body(0), 29, version=3), 0.0)  # none named yet
    assert core.stream_id == 0
    core.receive(raw_frame(15, price_body(5, STREAM), 70, version=3), 0.0)
    core.receive(raw_frame(16, price_body(6, None), 62, version=3), 0.0)
    snap, upd = core.pop(), core.pop()
    assert isinstance(upd, Price) and upd.stream_id == STREAM and upd.status == "ok"
    assert isinstance(snap, Price) and snap.stream_id == STREAM
    longer = Message("PriceUpdate", {"symbolId": 0, "tier": 0, "seq": 7}, block_length=78)
    core.receive(encode(longer), 0.0)  # a newer sender's longer update block
    later = core.pop()
    assert isinstance(later, Price) and later.stream_id == STREAM and later.status == "ok"


def p(seq: int, snapshot: bool, stream: int = 0, symbol: int = 2) -> Price:
    return Price(symbol, 0, seq, 108_001, 108_011, 5, snapshot=snapshot, stream_id=stream)


def test_a_restarted_server_with_the_same_seq_is_a_resync() -> None:
    """The issue's case: seq 2 held at 108001, the server restarts (a new stream), its
    price moved 2,000 points and its seq is 2 again."""
    t = SeqTracker()
    t.resume(7)
    assert t.apply(p(2, True, 7)) == "snapshot"
    t.resume(8)
    moved = Price(2, 0, 2, 110_001, 110_011, 5, snapshot=True, stream_id=8)
    assert t.apply(moved) == PriceStatus.RESYNC
    assert (t.resumed, t.resume_resyncs, t.stream_changes) == (0, 1, 1)
    t.resume(8)
    assert t.apply(p(3, True, 8)) == "resumed", "the same stream resumes by sequence"


def test_a_snapshot_of_a_new_stream_mid_session_resyncs_and_nothing_is_old() -> None:
    """A core takeover that could not prove its numbering: the server sends each key a
    snapshot of the new stream, whatever its seq; each is a resync."""
    t = SeqTracker()
    t.resume(7)
    for sym in (1, 2):
        assert t.apply(p(500, True, 7, sym)) == "snapshot"
    assert t.apply(p(1, True, 9, symbol=1)) == "resync"
    assert t.apply(p(2, True, 9, symbol=2)) == "resync"
    assert t.apply(p(3, False, symbol=2)) == "ok", "judged against the new stream's seq"
    assert (t.old, t.stream_changes, t.stream_of((2, 0))) == (0, 2, 9)


def test_version_2_servers_keep_the_sequence_rule() -> None:
    t = SeqTracker()
    t.resume(0)
    t.apply(p(2, True))
    t.resume(0)
    assert t.apply(p(2, True)) == "resumed"


@pytest.mark.parametrize("seed", range(25))
def test_resume_only_within_one_stream_over_generated_histories(seed: int) -> None:
    """Sessions whose server keeps its stream or has a new one (a restart, a takeover, a
    version 2 server: 0), each sending snapshots and updates of a few keys; a key whose
    stream changed gets a snapshot first (§5). Invariant: a snapshot is ``resumed`` only
    when its stream is its key's last snapshot's and its seq is the last one accepted or
    the next; ``old`` only below the last accepted seq of the same stream."""
    rng = random.Random(seed)
    t = SeqTracker()
    stream = rng.choice([0, 1])
    last: dict[int, tuple[int, int]] = {}  # key -> (stream, seq) of its last accepted price
    for _ in range(60):
        if rng.random() < 0.4:
            stream = rng.choice([stream, stream, stream + 1, 0])
        t.resume(stream)
        fresh = set(range(4))
        for _ in range(rng.randint(1, 12)):
            sym = rng.randrange(4)
            held = last.get(sym)
            same = held is not None and held[0] == stream
            snap = sym in fresh or not same or rng.random() < 0.1
            base = held[1] if same and held else rng.randint(1, 5)
            seq = max(1, base + rng.choice([-1, 0, 1, 1, 2]))
            status = t.apply(p(seq, snap, stream, sym))
            if status == "resumed":
                assert same and held and seq in (held[1], held[1] + 1), (held, stream, seq)
            if status == "old":
                assert same and held and seq < held[1] + 1, (held, stream, seq)
            if status != "old":
                last[sym] = (stream, seq)
            fresh.discard(sym)


def accepted(stream: int) -> Message:
    return Message("LogonAccepted", {"sessionId": 1, "heartbeatIntervalMs": 10_000,
                                     "streamId": stream})  # fmt: skip


def snapshot(seq: int, stream: int) -> Message:
    fields = {"symbolId": 0, "tier": 0, "seq": seq, "digits": 5, "bid": 1, "ask": 2}
    return Message("PriceSnapshot", dict(fields, streamId=stream))


@pytest.mark.parametrize(("second", "want"), [(7, "resumed"), (8, "resync")])
def test_a_subscriber_moving_to_another_stream_resyncs(second: int, want: str) -> None:
    clock = FakeClock()
    on_a = [accepted(7), snapshot(2, 7), ConnectionLost("EOF")]
    on_b = [accepted(second), snapshot(2, second)]
    sub = subscriber(clock, Peers(clock, {A: [on_a], B: [on_b]}))
    sub.subscribe([0], 0)
    statuses = []
    while len(statuses) < 2:
        ev = sub.next_event(10.0)
        assert ev is not None and ev.kind != "closed", ev
        if ev.price is not None:
            statuses.append(ev.status)
    assert statuses == ["snapshot", want]
    assert sub.tracker.stream_id == second


def restarted_case(tmp: Path, api: str) -> list[str]:
    """A terminal holds EURUSD at seq 1 from a server; the server is killed and started
    again on its port; its first price is seq 1 again, 2,000 points away. The statuses of
    the terminal's snapshots."""
    first = Server(tmp)
    port = first.port
    quote_once(first, 108_001)
    kind: Any = AioSubscriber if api == "aio" else Subscriber
    sub = kind([("127.0.0.1", port)], policy=ReconnectPolicy(Backoff(20, 200),
                                                             give_up_after_s=30))  # fmt: skip
    try:
        sub.subscribe([0], 0)
        statuses = snapshot_statuses(sub, 1)
        first.crash()
        again = Server(tmp, port=port)
        try:
            quote_once(again, 110_001)
            statuses += snapshot_statuses(sub, 1)
        finally:
            again.stop()
        return statuses
    finally:
        sub.close()


def quote_once(srv: Server, bid: int) -> None:
    prov = ProviderSession("127.0.0.1", srv.feed_port)
    prov.logon(0, "demo-feed")
    prov.quote([Quote(0, bid, bid + 10)])
    release(prov)


def snapshot_statuses(sub: Any, n: int) -> list[str]:
    out: list[str] = []
    deadline = time.monotonic() + 30
    while len(out) < n:
        assert time.monotonic() < deadline, out
        ev = sub.next_event(0.5)
        assert ev is None or ev.kind != "closed", ev
        if ev is not None and ev.price is not None and ev.price.snapshot:
            out.append(f"{ev.status} seq {ev.price.seq} stream {ev.price.stream_id != 0}")
    return out


def test_a_restarted_server_at_the_held_seq_is_a_resync(tmp_path: Path, api: str) -> None:
    """The real binary: a standalone server picks a fresh stream id when it starts, so the
    same seq on the restarted server is a resync, never a resume (it was taken for one)."""
    assert restarted_case(tmp_path, api) == [
        "snapshot seq 1 stream True",
        "resync seq 1 stream True",
    ]
