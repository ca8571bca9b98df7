"""The session core without a socket or a clock (pricewire_client.core): no price is lost
or reordered whatever requests wait and however the bytes are cut, answers reach their
request only, unreadable frames are skipped and counted, the inbox stays bounded, and time
drives heartbeats and the dead-peer check. Invariants over seeded generated streams."""

from __future__ import annotations

import random
import struct

import pytest

from pricewire_client import (
    ConnectionLost,
    FramingError,
    LogonRefused,
    Message,
    Price,
    PriceFlags,
    PricewireError,
    RequestRejected,
    SnapshotResponse,
    encode,
    messages,
)
from pricewire_client.codec import raw_frame
from pricewire_client.core import SessionCore
from pricewire_client.model import from_message

ACCEPTED = Message("LogonAccepted", {"sessionId": 1, "heartbeatIntervalMs": 1_000})


def price_msg(symbol: int, seq: int, snapshot: bool = False, tier: int = 0, **kw: int) -> Message:
    fields = {"symbolId": symbol, "tier": tier, "seq": seq, "digits": 5, "bid": 100 + seq,
              "ask": 110 + seq, "flags": 0}  # fmt: skip
    fields.update(kw)
    return Message("PriceSnapshot" if snapshot else "PriceUpdate", fields)


def logged_on(**kw: int) -> SessionCore:
    core = SessionCore(**kw)  # type: ignore[arg-type]
    core.start_logon(messages.logon("demo", "demo"), 0.0)
    core.receive(encode(ACCEPTED), 0.0)
    assert core.logon_result() is not None
    core.outgoing()
    return core


def cut(data: bytes, rng: random.Random) -> list[bytes]:
    """``data`` in random pieces (1 byte up to a few frames)."""
    out, pos = [], 0
    while pos < len(data):
        n = rng.choice([1, 3, 14, 62, 76, 200, 1000])
        out.append(data[pos : pos + n])
        pos += n
    return out


def answer_for(rid: int, kind: str) -> Message:
    if kind == "reject":
        return Message("Reject", {"requestId": rid, "refTemplateId": 17, "reason": 10,
                                  "retryAfterMs": 250}, data={"text": b"slow down"})  # fmt: skip
    if kind == "directory":
        return Message("SymbolDirectory", {"requestId": rid})
    return Message("SnapshotResponse", {"requestId": rid}, {"prices": []})


@pytest.mark.parametrize("seed", range(30))
def test_every_price_reaches_the_inbox_once_in_order_while_requests_wait(seed: int) -> None:
    """Generated: prices of 3 keys (updates in sequence, a snapshot now and then), answers
    to requests in flight (in any order, some Rejects), heartbeats, unknown templates and
    answers nobody waits for, cut into random pieces. The inbox holds exactly the prices
    sent, in order, plus the unclaimed messages; each request gets exactly its answer."""
    rng = random.Random(seed)
    core = logged_on()
    seqs = {0: 10, 1: 20, 2: 30}
    sent_prices: list[tuple[int, int]] = []
    pending: dict[int, str] = {}
    answered: dict[int, str] = {}
    wire = bytearray()
    unknown = orphans = 0
    for _ in range(400):
        roll = rng.random()
        if roll < 0.6:
            sym = rng.choice(list(seqs))
            seqs[sym] += 1
            wire += encode(price_msg(sym, seqs[sym], snapshot=rng.random() < 0.05))
            sent_prices.append((sym, seqs[sym]))
        elif roll < 0.75:
            kind = rng.choice(["snapshot", "directory", "reject"])
            rid = core.start_request(lambda r: messages.symbol_list_request(r), 0.0)
            pending[rid] = kind
        elif roll < 0.9 and pending:
            rid = rng.choice(list(pending))
            answered[rid] = pending.pop(rid)
            wire += encode(answer_for(rid, answered[rid]))
        elif roll < 0.95:
            wire += raw_frame(99, b"\0" * rng.randint(0, 20), 0)
            unknown += 1
        else:
            wire += encode(Message("SymbolDirectory", {"requestId": 10_000 + orphans}))
            orphans += 1
        if rng.random() < 0.1:
            wire += encode(Message("Heartbeat"))
    for piece in cut(bytes(wire), rng):
        core.receive(piece, 1.0)
    got = [m for m in core.inbox if isinstance(m, Price)]
    assert [(p.symbol_id, p.seq) for p in got] == sent_prices
    assert core.tracker.gaps == [] and core.stats.skipped_frames == unknown
    assert sum(m.name == "SymbolDirectory" for m in core.inbox) == orphans
    assert not any(m.name in ("Reject", "SnapshotResponse") for m in core.inbox)
    for rid in pending:
        assert core.take_answer(rid) is None, "still waiting"
    for rid, kind in answered.items():
        if kind == "reject":
            with pytest.raises(RequestRejected) as err:
                core.take_answer(rid)
            assert (err.value.reason, err.value.retry_after) == ("rate_limited", 0.25)
        else:
            answer = core.take_answer(rid)
            assert answer is not None and answer.request_id == rid
        assert core.take_answer(rid) is None, "an answer is handed out once"


def test_an_abandoned_request_drops_its_late_answer_and_an_orphan_reject_is_kept() -> None:
    core = logged_on()
    rid = core.start_request(lambda r: messages.symbol_list_request(r), 0.0)
    core.abandon(rid)
    core.receive(encode(answer_for(rid, "directory")), 0.0)
    core.receive(encode(answer_for(999, "reject")), 0.0)
    assert [m.name for m in core.inbox] == ["Reject"]
    assert core.stats.orphans == 1


def test_a_disconnect_fails_the_waiting_requests_and_stays_readable() -> None:
    core = logged_on()
    rid = core.start_request(lambda r: messages.symbol_list_request(r), 0.0)
    disc = Message("Disconnect", {"reason": 2, "retryAfterMs": 4_000}, data={"text": b"bye"})
    core.receive(encode(price_msg(0, 1, True)) + encode(disc), 0.0)
    with pytest.raises(ConnectionLost) as err:
        core.take_answer(rid)
    assert err.value.reason == "shutdown" and err.value.retry_after == 4.0
    core.connection_lost("EOF")
    assert [m.name for m in core.inbox] == ["PriceSnapshot", "Disconnect"]
    assert isinstance(core.error, ConnectionLost) and core.error.reason == "shutdown"


def test_logon_refusals_of_every_kind() -> None:
    for answer in (
        Message("LogonRejected", {"reason": 5, "retryAfterMs": 1_500}),
        Message("Disconnect", {"reason": 6, "retryAfterMs": 2_000}, data={"text": b"busy"}),
        Message("Reject", {"refTemplateId": 1, "reason": 1}, data={"text": b"bad"}),
    ):
        core = SessionCore()
        core.start_logon(messages.logon("demo", "demo"), 0.0)
        core.receive(encode(answer), 0.0)
        with pytest.raises(LogonRefused) as err:
            core.logon_result()
        assert err.value.reason in ("session_limit", "busy", "malformed"), err.value
    busy_first = SessionCore()  # Disconnect(busy) before the Logon was even sent
    busy_first.receive(encode(Message("Disconnect", {"reason": 6, "retryAfterMs": 10})), 0.0)
    busy_first.connection_lost("EOF")
    with pytest.raises(LogonRefused):
        busy_first.start_logon(messages.logon("demo", "demo"), 0.0)


def test_unreadable_frames_are_skipped_and_a_framing_error_comes_after_the_inbox() -> None:
    core = logged_on()
    short_price = raw_frame(16, b"\0" * 10, 10)  # a root block shorter than the schema's
    bad_schema = raw_frame(16, b"\0" * 62, 62, schema_id=0x1234)
    wire = encode(price_msg(0, 1, True)) + short_price + bad_schema + raw_frame(77, b"", 0)
    core.receive(wire + encode(price_msg(0, 2)) + b"\xff\xff\xff\xff", 0.0)
    assert [(m.name, m.seq) for m in core.inbox if isinstance(m, Price)] == [
        ("PriceSnapshot", 1), ("PriceUpdate", 2),
    ]  # fmt: skip
    assert core.stats.skipped_frames == 3
    assert isinstance(core.error, FramingError)
    assert core.pop() is not None and core.pop() is not None
    with pytest.raises(FramingError):
        core.raise_if_failed()


def test_a_full_inbox_keeps_the_newest_price_per_key_flagged_conflated() -> None:
    core = logged_on(inbox_max=16)
    wire = b"".join(encode(price_msg(k, s, s == 1)) for s in range(1, 9) for k in (0, 1))
    core.receive(wire + encode(Message("Heartbeat")), 0.0)
    prices = [m for m in core.inbox if isinstance(m, Price)]
    assert [(p.symbol_id, p.seq) for p in prices] == [(0, 8), (1, 8)]
    assert all(p.snapshot and p.conflated and p.status == "resync" for p in prices)
    assert core.stats.conflated == 14
    assert [m.name for m in core.inbox][2:] == ["Heartbeat"]  # came after the compaction
    core.receive(encode(price_msg(0, 9)), 0.0)
    assert core.inbox[-1].status == "ok"  # the stream goes on from the newest


def price_fields(rng: random.Random) -> dict[str, int]:
    return {
        "symbolId": rng.randrange(1 << 16), "tier": rng.randrange(256),
        "flags": rng.randrange(256), "digits": rng.randrange(10),
        "providers": rng.randrange(256), "seq": rng.randrange(1, 1 << 64),
        "bid": rng.randrange(-(1 << 63), 1 << 63), "ask": rng.randrange(-(1 << 63), 1 << 63),
        "bidSize": rng.randrange(1 << 64), "askSize": rng.randrange(1 << 64),
        "providerTimeNs": rng.randrange(1 << 64), "engineTimeNs": rng.randrange(1 << 64),
    }  # fmt: skip


@pytest.mark.parametrize("seed", range(5))
def test_the_fast_price_path_decodes_as_the_codec_does(seed: int) -> None:
    """Prices are read straight from their block; the generic codec path gives the same
    values for every field, for updates and for snapshots of version 2 and 3."""
    rng = random.Random(seed)
    for _ in range(200):
        fields = price_fields(rng)
        snap = rng.random() < 0.5
        version = rng.choice([2, 3])
        if snap and version == 3:
            fields["streamId"] = rng.randrange(1, 1 << 64)
        msg = Message("PriceSnapshot" if snap else "PriceUpdate", fields, version=version)
        if snap and version == 2:
            msg.block_length = 62
        core = SessionCore()
        core.receive(encode(msg), 0.0)
        fast = core.pop()
        slow = from_message(msg)
        assert isinstance(fast, Price) and isinstance(slow, Price)
        for name in Price.__slots__:  # type: ignore[attr-defined]
            if name != "status":
                assert getattr(fast, name) == getattr(slow, name), name
        assert fast.flags == PriceFlags(fields["flags"])


def test_heartbeats_and_the_dead_peer_follow_the_clock() -> None:
    core = logged_on()
    core.last_sent = core.last_received = 100.0
    assert core.next_timer() == 101.0
    core.timer(100.5)
    assert core.outgoing() == b""
    core.timer(101.0)
    assert core.outgoing() == encode(messages.heartbeat()) and core.stats.heartbeats_sent == 1
    core.receive(encode(Message("Heartbeat")), 102.0)
    core.timer(104.9, check_dead=True)
    assert core.error is None
    core.timer(105.0, check_dead=False)  # a reader paused on purpose is not a dead peer
    assert core.error is None
    core.timer(105.0)
    assert isinstance(core.error, ConnectionLost) and "dead peer" in str(core.error)
    with pytest.raises(PricewireError):
        core.start_request(lambda r: messages.symbol_list_request(r), 105.0)


def test_a_resync_answer_moves_the_tracker_and_is_handed_on() -> None:
    core = logged_on()
    core.receive(encode(price_msg(4, 10, True, tier=2)) + encode(price_msg(4, 13, tier=2)), 0.0)
    req = core.outgoing()
    (rid,) = struct.unpack_from("<Q", req, 14)
    answer = Message("SnapshotResponse", {"requestId": rid},
                     {"prices": [dict(price_msg(4, 16, tier=2).fields, providers=1)]})  # fmt: skip
    core.receive(encode(answer) + encode(price_msg(4, 15, tier=2)), 0.0)
    assert isinstance(core.inbox[2], SnapshotResponse)
    assert core.inbox[3].status == "old" and core.tracker.expected[(4, 2)] == 17


def test_a_rate_limited_reject_holds_requests_for_its_floor() -> None:
    core = logged_on()
    rid = core.start_request(lambda r: messages.symbol_list_request(r), 10.0)
    core.receive(encode(answer_for(rid, "reject")), 10.0)  # rate_limited, 250 ms
    with pytest.raises(RequestRejected):
        core.take_answer(rid)
    assert core.quiet_left(10.1, 5.0) == pytest.approx(0.15)
    assert core.quiet_left(10.25, 5.0) == 0.0
    with pytest.raises(RequestRejected) as err:  # the floor outlasts the request's timeout
        core.quiet_left(10.0, 0.1)
    assert err.value.reason == "rate_limited"
