"""The client's reconnect and resume decisions without a socket or a server: the backoff
arithmetic, the retry policy, the sequence tracker across a reconnect, and a
:class:`Subscriber` driven through scripted in-memory sessions with an injected clock,
sleep and random generator."""

from __future__ import annotations

import random
from collections import deque

import pytest

from pricewire_client import (
    ConnectionLost,
    Disconnect,
    FrameReader,
    LogonRejected,
    Message,
    Price,
    Reject,
    SeqTracker,
    Session,
    decode,
    encode,
)
from pricewire_client.codec import raw_frame
from pricewire_client.reconnect import Backoff, ReconnectPolicy, retry_floor, system_rng
from pricewire_client.schema import DisconnectReason, LogonRejectReason, RejectReason
from pricewire_client.subscriber import Address, Subscriber, parse_addresses

RNG_SEED = 7


class Top(random.Random):
    """A generator whose every uniform draw is the top of its window."""

    def uniform(self, a: float, b: float) -> float:
        return b


class Zero(random.Random):
    """A generator whose every uniform draw is the bottom of its window."""

    def uniform(self, a: float, b: float) -> float:
        return a


# ---- backoff and policy ------------------------------------------------------------------


def test_windows_double_from_base_up_to_the_cap() -> None:
    b = Backoff(100, 1_000)
    assert [b.window_ms(a) for a in range(6)] == [100, 200, 400, 800, 1_000, 1_000]
    assert b.window_ms(500) == 1_000, "a huge attempt count stays at the cap"
    rng = random.Random(RNG_SEED)
    for attempt in range(10):
        assert 0 <= b.delay_ms(attempt, 0, rng) <= b.window_ms(attempt)
    with pytest.raises(ValueError):
        Backoff(0, 100)
    with pytest.raises(ValueError):
        Backoff(200, 100)


def test_delays_are_jittered_and_deterministic_under_a_seed() -> None:
    def run(seed: int) -> list[float | None]:
        p = ReconnectPolicy(Backoff(100, 10_000))
        rng = random.Random(seed)
        return [p.next_delay(0.0, True, 0, rng) for _ in range(6)]

    assert run(RNG_SEED) == run(RNG_SEED)
    assert run(RNG_SEED) != run(RNG_SEED + 1), "no fixed schedule"
    rng = random.Random(RNG_SEED)
    expected = [Backoff(100, 10_000).delay_ms(a, 0, rng) / 1000 for a in range(6)]
    assert run(RNG_SEED) == expected


def test_system_generators_differ_between_processes() -> None:
    # Seeded from os.urandom: two generators (as two processes would) draw apart.
    draws = {tuple(system_rng().random() for _ in range(4)) for _ in range(3)}
    assert len(draws) == 3


def test_server_retry_after_is_a_floor() -> None:
    p = ReconnectPolicy(Backoff(100, 1_000))
    assert p.next_delay(0.0, True, 2_350, Zero()) == 2.35, "a floor above the cap"
    assert p.next_delay(0.0, True, 5, Zero()) == 0.005
    rng = random.Random(RNG_SEED)
    assert all(p.next_delay(0.0, True, 300, rng) >= 0.3 for _ in range(20))  # type: ignore[operator]


def test_final_answers_stop_and_the_rest_retry_with_the_servers_floor() -> None:
    assert retry_floor(None) == (True, 0)
    assert retry_floor(Disconnect(DisconnectReason.LOGOUT, 0)) == (False, 0)
    assert retry_floor(Disconnect(DisconnectReason.AUTH, 0)) == (False, 0)
    assert retry_floor(LogonRejected(LogonRejectReason.AUTH, 0)) == (False, 0)
    assert retry_floor(LogonRejected(LogonRejectReason.NOT_ENTITLED, 0))[0] is False
    assert retry_floor(Disconnect(DisconnectReason.SHUTDOWN, 4_200)) == (True, 4_200)
    assert retry_floor(LogonRejected(LogonRejectReason.BUSY, 3_100)) == (True, 3_100)
    assert retry_floor(LogonRejected(99, 10)) == (True, 10), "an unknown reason retries"
    assert retry_floor(Reject(0, 1, RejectReason.MALFORMED, 0)) == (True, 0)
    assert ReconnectPolicy().next_delay(0.0, False, 0, Zero()) is None


def test_attempts_are_bounded_per_outage_and_the_window_resets_only_after_a_stable_session() -> (
    None
):
    p = ReconnectPolicy(Backoff(100, 100_000), attempts_max=5, stable_after_s=10.0)
    rng = random.Random(RNG_SEED)
    for _ in range(4):
        assert p.next_delay(0.0, True, 0, rng) is not None
    p.on_connected(1.0)  # dropped after 2 s: a flapping server, the backoff keeps growing
    assert p.next_delay(3.0, True, 0, Top()) == 1.6  # window of attempt 4
    for _ in range(4):  # a new outage: 5 attempts in a row again
        assert p.next_delay(3.0, True, 0, rng) is not None
    assert p.next_delay(3.0, True, 0, rng) is None, "5 attempts in a row: give up"
    p.on_connected(10.0)  # up for 10 s: the next window starts from the base again
    assert p.next_delay(20.0, True, 0, Top()) == 0.1
    assert p.attempt == 1 and p.failures == 1
    assert ReconnectPolicy(attempts_max=0).next_delay(0.0, True, 0, Top()) is None


def test_a_deadline_bounds_the_reconnecting() -> None:
    p = ReconnectPolicy(Backoff(1_000, 1_000), give_up_after_s=2.5)
    assert p.next_delay(100.0, True, 0, Top()) == 1.0
    assert p.next_delay(101.0, True, 0, Top()) == 1.0
    assert p.next_delay(102.0, True, 0, Top()) is None, "would retry 3 s after the loss"


def test_the_deadline_counts_from_the_last_lost_session() -> None:
    """A short session between two outages (under stable_after_s) starts a new outage: a
    first attempt is made however long the previous outage was."""
    p = ReconnectPolicy(Backoff(1_000, 1_000), give_up_after_s=2.5, stable_after_s=10.0)
    assert p.next_delay(100.0, True, 0, Top()) == 1.0
    assert p.next_delay(101.0, True, 0, Top()) == 1.0  # outage since 100 s
    p.on_connected(102.0)
    assert p.next_delay(110.2, True, 0, Top()) == 1.0, "lost after 8.2 s: one attempt at least"
    assert p.next_delay(111.2, True, 0, Top()) == 1.0
    assert p.next_delay(112.2, True, 0, Top()) is None, "2.5 s after the loss at 110.2 s"
    p.on_connected(200.0)  # a floor beyond the deadline still gets its one attempt
    assert p.next_delay(201.0, True, 9_000, Top()) == 9.0
    assert p.next_delay(210.0, True, 0, Top()) is None


@pytest.mark.parametrize("seed", range(20))
def test_every_lost_session_gets_an_attempt_under_generated_schedules(seed: int) -> None:
    """Invariant over seeded schedules of sessions and failures: after a lost session the
    policy gives a delay (never None) unless the answer was final; it gives up only after
    attempts_max failures in a row or past give_up_after_s of the current outage."""
    rng = random.Random(seed)
    p = ReconnectPolicy(Backoff(50, 2_000), attempts_max=rng.randint(1, 6),
                        stable_after_s=rng.choice([1.0, 10.0]),
                        give_up_after_s=rng.choice([None, 0.5, 3.0]))  # fmt: skip
    now, outage_start, failures, connected = 0.0, None, 0, False
    for _ in range(200):
        if connected:
            now += rng.uniform(0.0, 12.0)
            delay = p.next_delay(now, True, 0, rng)
            assert delay is not None, "a lost session always gets one attempt"
            outage_start, failures, connected = now, 1, False
        elif rng.random() < 0.3:
            p.on_connected(now)
            connected = True
            continue
        else:
            delay = p.next_delay(now, True, 0, rng)
            outage_start = now if outage_start is None else outage_start
            if delay is None:  # the window's top is the cap, 2 s
                late = (
                    p.give_up_after_s is not None and now + 2.0 - outage_start > p.give_up_after_s
                )
                assert failures >= p.attempts_max or late, (failures, now - outage_start)
                return
            failures += 1
        now += delay


# ---- sequence tracker across a reconnect -------------------------------------------------


def price(name: str, symbol: int, seq: int, tier: int = 0, stream: int = 0) -> Message:
    fields = {"symbolId": symbol, "tier": tier, "seq": seq, "bid": 1, "ask": 2, "digits": 5}
    if stream:
        fields["streamId"] = stream
    return Message(name, fields)


def typed(name: str, symbol: int, seq: int, tier: int = 0, stream: int = 0) -> Price:
    return Price(symbol, tier, seq, 1, 2, 5, snapshot=name == "PriceSnapshot", stream_id=stream)


def test_after_a_resume_a_snapshot_resyncs_only_on_a_real_gap() -> None:
    t = SeqTracker()
    for sym in (1, 2, 3, 4):
        assert t.apply(typed("PriceSnapshot", sym, 10)) == "snapshot"
    t.resume()
    # The price held, or the next one: nothing missed.
    assert t.apply(typed("PriceSnapshot", 1, 10)) == "resumed"
    assert t.apply(typed("PriceSnapshot", 2, 11)) == "resumed"
    # Prices missed, or a server behind (restarted): a resync.
    assert t.apply(typed("PriceSnapshot", 3, 13)) == "resync"
    assert t.apply(typed("PriceSnapshot", 4, 4)) == "resync"
    assert t.expected[(4, 0)] == 5
    assert (t.resumed, t.resume_resyncs, t.gaps) == (2, 2, [])
    # Only the first snapshot after the resume is judged; updates go on in order.
    assert t.apply(typed("PriceSnapshot", 1, 10)) == "snapshot"
    assert t.apply(typed("PriceUpdate", 2, 12)) == "ok"
    # A key first seen on the new session is a plain snapshot.
    assert t.apply(typed("PriceSnapshot", 5, 99)) == "snapshot"


# ---- the subscriber, through scripted sessions -------------------------------------------


class FakeClock:
    """A clock that only moves when the subscriber sleeps or a scripted read waits."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


Script = list[Message | Exception | bytes]


class ScriptedTransport:
    """A transport whose peer is a script: frames to read (or an error to raise), no socket.

    Every frame goes through the real session (decode, tracking, logon); reading an empty
    script waits out the timeout on the fake clock. What the session sends is decoded into
    ``sent``.
    """

    def __init__(self, script: Script, clock: FakeClock) -> None:
        self.script = deque(script)
        self.clock = clock
        self.sent: list[Message] = []
        self.reader = FrameReader()

    def send(self, data: bytes) -> None:
        self.reader.feed(data)
        while (frame := self.reader.next_frame()) is not None:
            self.sent.append(decode(frame))

    def recv(self, timeout_s: float) -> bytes | None:
        if not self.script:
            self.clock.now += timeout_s
            return None
        item = self.script.popleft()
        if isinstance(item, Exception):
            raise item
        return item if isinstance(item, bytes) else encode(item)

    def close(self) -> None:
        pass


ACCEPTED = Message("LogonAccepted", {"sessionId": 1, "heartbeatIntervalMs": 1_000})
A: Address = ("10.0.0.1", 9400)
B: Address = ("10.0.0.2", 9400)


class Peers:
    """What each address does on each connect, in turn: a script, or None to refuse."""

    def __init__(self, clock: FakeClock, scripts: dict[Address, list[Script | None]]) -> None:
        self.clock = clock
        self.scripts = {a: deque(s) for a, s in scripts.items()}
        self.sessions: list[tuple[Address, ScriptedTransport]] = []

    def connect(self, addr: Address) -> Session:
        queue = self.scripts.get(addr)
        script = queue.popleft() if queue else None
        if script is None:
            raise ConnectionRefusedError(f"{addr[0]} refuses")
        transport = ScriptedTransport(script, self.clock)
        self.sessions.append((addr, transport))
        return Session(addr[0], addr[1], clock=self.clock, transport=transport)


def subscriber(clock: FakeClock, peers: Peers, **kw: object) -> Subscriber:
    return Subscriber(
        [A, B],
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(RNG_SEED),
        connect=peers.connect,
        policy=ReconnectPolicy(Backoff(100, 1_000)),
        **kw,  # type: ignore[arg-type]
    )


def kinds(sub: Subscriber, n: int) -> list[tuple[str, str]]:
    """The next ``n`` events as (kind, price status or message name or reason)."""
    out: list[tuple[str, str]] = []
    for _ in range(n):
        ev = sub.next_event(10.0)
        assert ev is not None, f"no event after {out}"
        out.append((ev.kind, ev.status or (ev.msg.name if ev.msg else ev.reason)))
    return out


def test_a_dead_first_address_then_failover_resumes_by_sequence() -> None:
    clock = FakeClock()
    on_b: Script = [ACCEPTED, price("PriceSnapshot", 0, 10), price("PriceUpdate", 0, 11)]
    on_b += [price("PriceSnapshot", 1, 40), ConnectionLost("EOF")]
    # A refuses the first connect; B serves and dies; A then has the same sequences
    # (symbol 0 moved on by one price, symbol 1 not at all).
    on_a: Script = [ACCEPTED, price("PriceSnapshot", 0, 12), price("PriceSnapshot", 1, 40)]
    peers = Peers(clock, {A: [None, on_a], B: [on_b]})
    sub = subscriber(clock, peers)
    assert sub.subscribe(["EURUSD", "GBPUSD"], 0) is None, "kept until a session is up"
    assert kinds(sub, 5) == [
        ("disconnected", "connect to ('10.0.0.1', 9400) failed: 10.0.0.1 refuses"),
        ("logon", "LogonAccepted"),
        ("price", "snapshot"),
        ("price", "ok"),
        ("price", "snapshot"),
    ]
    assert clock.slept == [], "the first round tries every address without waiting"
    assert [m.name for m in peers.sessions[0][1].sent] == ["Logon", "Subscribe"]
    lost = sub.next_event(10.0)
    assert lost is not None and lost.kind == "disconnected" and lost.msg is None
    assert lost.retry_in_s is not None and 0 <= lost.retry_in_s <= 0.1
    assert kinds(sub, 3) == [("logon", "LogonAccepted"), ("price", "resumed"), ("price", "resumed")]
    assert clock.slept == [pytest.approx(lost.retry_in_s)], "one backoff wait, as drawn"
    addr, again = peers.sessions[-1]
    assert addr == A, "the next attempt goes to the next address"
    subscribes = [m.groups["entries"] for m in again.sent if m.name == "Subscribe"]
    by_name = [{"symbolId": 0xFFFF, "name": "EURUSD"}, {"symbolId": 0xFFFF, "name": "GBPUSD"}]
    assert subscribes == [by_name], "subscribed again on the new session"
    t = sub.tracker
    assert (t.resumed, t.resume_resyncs, t.gaps) == (2, 0, [])
    assert t.expected == {(0, 0): 13, (1, 0): 41}
    assert (sub.logons, sub.disconnects) == (2, 1)


def test_a_missed_price_is_a_resync_on_the_new_session() -> None:
    clock = FakeClock()
    on_a: Script = [ACCEPTED, price("PriceSnapshot", 0, 10), ConnectionLost("reset")]
    on_b: Script = [ACCEPTED, price("PriceSnapshot", 0, 12)]  # seq 11 was missed
    sub = subscriber(clock, Peers(clock, {A: [on_a], B: [on_b]}))
    sub.subscribe([0], 0)
    got = kinds(sub, 5)
    assert got[:2] == [("logon", "LogonAccepted"), ("price", "snapshot")]
    assert got[2][0] == "disconnected" and "reset" in got[2][1]
    assert got[3:] == [("logon", "LogonAccepted"), ("price", "resync")]
    assert (sub.tracker.resumed, sub.tracker.resume_resyncs) == (0, 1)
    assert sub.tracker.expected == {(0, 0): 13}


def test_disconnect_retry_after_is_honoured_and_auth_ends_the_subscriber() -> None:
    clock = FakeClock()
    shutdown = Message("Disconnect", {"reason": DisconnectReason.SHUTDOWN, "retryAfterMs": 4_200})
    busy = Message("LogonRejected", {"reason": LogonRejectReason.BUSY, "retryAfterMs": 3_100})
    auth = Message("LogonRejected", {"reason": LogonRejectReason.AUTH, "retryAfterMs": 0})
    peers = Peers(clock, {A: [[ACCEPTED, shutdown], [auth]], B: [[busy]]})
    sub = subscriber(clock, peers)
    assert kinds(sub, 1) == [("logon", "LogonAccepted")]
    start = clock()
    down = sub.next_event(10.0)
    assert down is not None and down.kind == "disconnected" and down.msg is not None
    assert down.reason.startswith("Disconnect(shutdown)") and down.retry_in_s == 4.2
    refused = sub.next_event(10.0)
    assert refused is not None and refused.kind == "disconnected"
    assert clock() - start == pytest.approx(4.2), "not sooner than retryAfterMs"
    assert refused.reason.startswith("LogonRejected(busy)") and refused.retry_in_s == 3.1
    final = kinds(sub, 2)
    assert final[0] == ("disconnected", "LogonRejected")
    assert final[1][0] == "closed" and "refused for good" in final[1][1]
    again = sub.next_event(1.0)
    assert sub.closed and again is not None and again.kind == "closed"
    assert len(peers.sessions) == 3, "no attempt after LogonRejected(auth)"


def test_a_silent_server_is_dead_after_three_heartbeats_and_attempts_are_bounded() -> None:
    clock = FakeClock()
    peers = Peers(clock, {A: [[ACCEPTED]]})  # then every connect is refused
    sub = Subscriber(
        [A, B],
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(RNG_SEED),
        connect=peers.connect,
        policy=ReconnectPolicy(Backoff(100, 1_000), attempts_max=3),
    )
    assert kinds(sub, 1) == [("logon", "LogonAccepted")]
    logged_on_at = clock()
    dead = sub.next_event(10.0)
    assert dead is not None and dead.kind == "disconnected" and "dead peer" in dead.reason
    assert 3.0 <= clock() - logged_on_at < 3.1, "3 x the 1,000-ms heartbeat interval"
    got = [sub.next_event(10.0) for _ in range(4)]
    assert [e.kind for e in got if e] == ["disconnected"] * 3 + ["closed"]
    assert got[-1] is not None and "attempts exhausted" in got[-1].reason
    assert len(clock.slept) == 3


def test_an_unreadable_frame_is_skipped_and_a_bad_length_ends_the_session() -> None:
    clock = FakeClock()
    unknown = raw_frame(99, b"", 0)  # a template a newer server might send
    bad_length = b"\x00\x00\x00\x02\xeb\x50"  # SOFH length below the minimum
    on_a: Script = [ACCEPTED, unknown, price("PriceSnapshot", 0, 10), bad_length]
    sub = subscriber(clock, Peers(clock, {A: [on_a]}))
    got = kinds(sub, 3)
    assert got[:2] == [("logon", "LogonAccepted"), ("price", "snapshot")]
    assert got[2][0] == "disconnected"
    assert got[2][1].startswith("connection lost: frame length 2 outside")
    assert sub.skipped_frames == 1


def test_addresses_parse_with_a_default_host_and_a_bound() -> None:
    assert parse_addresses("10.0.0.1:9400,9401") == [("10.0.0.1", 9400), ("127.0.0.1", 9401)]
    assert parse_addresses("[::1]:9400") == [("::1", 9400)]
    for bad in ("", "a:b", "h:0", "h:70000", ",".join(["1"] * 17)):
        with pytest.raises(ValueError):
            parse_addresses(bad)
