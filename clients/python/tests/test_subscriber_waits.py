"""The Subscriber's waits: ``next_event(timeout)`` never blocks past its timeout, whatever
the server does (accepts and never answers, never speaks TLS), connect and logon are each
bounded, a lost session always gets a reconnect attempt, and a ``while not sub.closed``
loop sees the final ``closed`` event. Scripted sessions on a fake clock, plus real
listeners on 127.0.0.1 that accept and say nothing."""

from __future__ import annotations

import random
import socket
import ssl
import time
from collections.abc import Iterator

import pytest
from test_reconnect import (
    ACCEPTED,
    RNG_SEED,
    A,
    B,
    FakeClock,
    Peers,
    ScriptedTransport,
    price,
    subscriber,
)

from pricewire_client import ConnectionLost, Message, RequestRejected, Session
from pricewire_client.reconnect import Backoff, ReconnectPolicy
from pricewire_client.subscriber import Subscriber

LOGON_TIMEOUT_S = 2.0


def test_next_event_honours_its_timeout_while_a_server_never_answers_the_logon() -> None:
    clock = FakeClock()
    peers = Peers(clock, {A: [[]], B: [[ACCEPTED]]})  # A accepts and never answers
    sub = subscriber(clock, peers, logon_timeout_s=LOGON_TIMEOUT_S)
    waits: list[float] = []
    while len(waits) < 100:
        start = clock()
        ev = sub.next_event(0.5)
        waits.append(clock() - start)
        if ev is not None:
            break
    assert max(waits) <= 0.5 + 1e-9, waits
    assert ev.kind == "disconnected" and "no answer to Logon within 2 s" in ev.reason, ev
    assert sum(waits) == pytest.approx(LOGON_TIMEOUT_S), "the logon is bounded on its own"
    assert sub.next_event(0.5) is not None, "the next address is tried at once (first round)"
    assert sub.connected


def test_a_lost_session_gets_an_attempt_however_old_the_outage_before_it() -> None:
    """A first outage spends most of give_up_after_s, a session of 8.2 s (under
    stable_after_s) follows and ends: the subscriber still tries again, at once."""
    clock = FakeClock()
    accepted = Message("LogonAccepted", {"sessionId": 1, "heartbeatIntervalMs": 10_000})
    session = [accepted, price("PriceSnapshot", 0, 10)]
    peers = Peers(clock, {A: [None, session], B: [None, [accepted]]})
    policy = ReconnectPolicy(Backoff(1_000, 1_000), give_up_after_s=3.0, stable_after_s=10.0)
    sub = Subscriber(
        [A, B],
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(RNG_SEED),
        connect=peers.connect,
        policy=policy,
    )
    got = [sub.next_event(10.0) for _ in range(4)]
    assert [e.kind for e in got if e] == ["disconnected", "disconnected", "logon", "price"]
    clock.now += 2.5  # the first outage is long past the deadline's start
    assert sub.next_event(8.2) is None, "a quiet session of 8.2 s"
    peers.sessions[-1][1].script.append(ConnectionLost("EOF"))
    lost = sub.next_event(1.0)
    assert lost is not None and lost.kind == "disconnected" and lost.retry_in_s is not None
    again = sub.next_event(10.0)
    assert again is not None and again.kind == "logon", again
    assert peers.sessions[-1][0] == B


def test_while_not_closed_sees_the_closed_event() -> None:
    clock = FakeClock()
    auth = Message("LogonRejected", {"reason": 1, "retryAfterMs": 0})
    sub = subscriber(clock, Peers(clock, {A: [[auth]]}))
    seen: list[str] = []
    while not sub.closed and len(seen) < 10:
        ev = sub.next_event(1.0)
        if ev is not None:
            seen.append(ev.kind)
    assert seen == ["disconnected", "closed"]
    assert [e.kind for e in subscriber(clock, Peers(clock, {A: [[auth]]}))] == seen


@pytest.fixture
def mute_listener() -> Iterator[tuple[str, int]]:
    """A listener that accepts connections (the kernel does) and never sends a byte."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield ("127.0.0.1", listener.getsockname()[1])


def timed_events(sub: Subscriber, timeout_s: float, until_s: float) -> list[float]:
    """How long each ``next_event(timeout_s)`` took, until an event or ``until_s``."""
    took: list[float] = []
    stop = time.monotonic() + until_s
    while time.monotonic() < stop:
        start = time.monotonic()
        ev = sub.next_event(timeout_s)
        took.append(time.monotonic() - start)
        if ev is not None:
            assert ev.kind == "disconnected", ev
            break
    return took


@pytest.mark.parametrize("tls", [False, True], ids=["logon", "tls_handshake"])
def test_a_mute_server_never_holds_next_event_past_its_timeout(
    mute_listener: tuple[str, int], tls: bool
) -> None:
    """Real sockets: the connect succeeds (the kernel accepts), then nothing comes — no
    LogonAccepted, or no TLS ServerHello. Each call returns by its own timeout; the
    attempt ends after its bound (the margin only absorbs a busy host's scheduling)."""
    context = ssl.create_default_context() if tls else None
    sub = Subscriber(
        [mute_listener],
        tls=context,
        timeout_s=LOGON_TIMEOUT_S,
        policy=ReconnectPolicy(attempts_max=0),
    )
    took = timed_events(sub, 0.5, until_s=30.0)
    assert max(took) < 0.5 + 2.0, took
    assert LOGON_TIMEOUT_S - 0.5 <= sum(took) < LOGON_TIMEOUT_S + 5.0, took
    closed = sub.next_event(0.1)
    assert closed is not None and closed.kind == "closed"


def test_a_session_waits_out_a_rate_limit_floor_before_its_next_request() -> None:
    """§4.2 and §9: after Reject(rate_limited) send nothing but Heartbeats until its
    retryAfterMs passed. The next request goes out after the floor, reading meanwhile."""
    clock = FakeClock()
    reject = Message("Reject", {"requestId": 1, "refTemplateId": 10, "reason": 10,
                                "retryAfterMs": 700})  # fmt: skip
    directory = Message("SymbolDirectory", {"requestId": 2})
    transport = ScriptedTransport([reject], clock)
    sess = Session("peer", 1, clock=clock, transport=transport)
    with pytest.raises(RequestRejected):
        sess.symbols()
    rejected_at = clock()
    with pytest.raises(RequestRejected):
        sess.symbols(timeout_s=0.5)  # the floor outlasts it: refused at once, nothing sent
    assert [m.name for m in transport.sent] == ["SymbolListRequest"] and clock() == rejected_at
    original = transport.recv

    def answer_once_asked(timeout_s: float) -> bytes | None:
        if len(transport.sent) == 2 and not transport.script:
            transport.script.append(directory)  # the peer answers the request it got
        return original(timeout_s)

    transport.recv = answer_once_asked  # type: ignore[method-assign]
    answer = sess.symbols()
    assert answer.request_id == 2 and clock() >= rejected_at + 0.7
    assert [m.name for m in transport.sent] == ["SymbolListRequest", "SymbolListRequest"]
