"""No price is lost while requests wait, against the real server at speed: a provider
quotes 3 symbols at 10,000 quotes a second for 10 s (``tests/stream_peer.py``, its own
process, which also runs a plain subscriber that only reads), while the client under test
reads the same 3 keys and sends a SnapshotRequest, a HistoryRequest and a
SymbolListRequest after every 50th price.

Verdict, independent of the host's speed: every sequence the plain subscriber received is
received by the client under test too, unless it was replaced by a ``conflated`` snapshot
the caller received instead — by the server (a reader slower than the stream, §5) or by
the session's own bounded inbox (a caller that keeps requesting faster than it reads);
every price the session decoded reached the caller or was counted as conflated; no
sequence gap. A slow host only moves prices from the first case to the second; the figures
(rate reached, conflations, requests the server shed) are printed, not asserted.
``PRICEWIRE_STREAM_S`` and ``PRICEWIRE_STREAM_RATE`` change the length and rate.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pricewire_client import Price, RequestRejected, Session, SessionStats, Subscriber, aio

from server import Server

HERE = Path(__file__).resolve().parent
SYMBOLS = [0, 1, 2]
TIER = 0
SECONDS = float(os.environ.get("PRICEWIRE_STREAM_S", "10"))
SHORT_S = min(SECONDS, 3.0)
RATE = float(os.environ.get("PRICEWIRE_STREAM_RATE", "10000"))
REQUEST_EVERY = 50
QUIET_S = 2.0
# Three requests per 50 prices at 10,000/s is 600 requests/s: far over the account's
# default rate (100/s). The limit is not what this test is about; nor is the cut of a
# reader behind for 5 s (on a busy host the reader falls behind: the server conflates).
UNLIMITED = [
    "--account-request-rate-per-s", "1000000", "--account-request-burst", "1000000",
    "--msg-rate-per-s", "1000000", "--msg-burst", "1000000", "--slow-consumer-ms", "600000",
]  # fmt: skip
BACKOFF_REASONS = ("overloaded", "rate_limited", "deadline_expired")


@pytest.fixture(scope="module")
def fast_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(Path(tmp_path_factory.mktemp("stream")), UNLIMITED)
    yield srv
    srv.stop()


@dataclass
class Tally:
    """What the caller received, per symbol."""

    seqs: dict[int, list[int]] = field(default_factory=lambda: {s: [] for s in SYMBOLS})
    replaced: dict[int, set[int]] = field(default_factory=lambda: {s: set() for s in SYMBOLS})
    prices: int = 0
    requests: int = 0
    shed: int = 0
    conflated: int = 0
    quiet_until: float = 0.0

    def add(self, price: Price) -> bool:
        """Record one price; whether requests are due after it."""
        seqs = self.seqs[price.symbol_id]
        if price.conflated and seqs:  # replaced by this snapshot (server or inbox)
            self.replaced[price.symbol_id].update(range(seqs[-1] + 1, price.seq))
            self.conflated += 1
        seqs.append(price.seq)
        self.prices += 1
        return self.prices % REQUEST_EVERY == 0 and time.monotonic() >= self.quiet_until

    def rejected(self, err: RequestRejected) -> None:
        """A request the server shed: honour its retry-after before the next ones (§4.2)."""
        assert err.reason in BACKOFF_REASONS, err
        self.shed += 1
        self.quiet_until = time.monotonic() + err.retry_after


class Peer:
    """The feeding and plain-subscribing process."""

    def __init__(self, srv: Server, seconds: float) -> None:
        self.path = srv.log_path.with_suffix(f".stream-{time.monotonic_ns()}.json")
        args = [sys.executable, str(HERE / "stream_peer.py"), str(srv.port), str(srv.feed_port),
                str(seconds), str(RATE), str(self.path)]  # fmt: skip
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def result(self) -> dict[str, object]:
        assert self.proc.wait(60) == 0, "the peer failed"
        return dict(json.loads(self.path.read_text()))


def verdict(tally: Tally, peer: dict[str, object], stats: SessionStats, gaps: list[object]) -> str:
    """Assert the stream reached the caller whole; a one-line report."""
    plain: dict[str, list[int]] = peer["seqs"]  # type: ignore[assignment]
    assert not peer["error"], peer["error"]
    assert tally.prices + stats.conflated == stats.prices, (
        "every price the session decoded reached the caller, or was counted as conflated"
    )
    assert gaps == [], gaps[:5]
    compared = 0
    for sym in SYMBOLS:
        mine = tally.seqs[sym]
        assert mine == sorted(set(mine)), f"symbol {sym}: out of order or repeated"
        lo, hi = mine[0], mine[-1]
        covered = set(mine) | tally.replaced[sym]
        theirs = [s for s in plain[str(sym)] if lo <= s <= hi]
        missing = [s for s in theirs if s not in covered]
        assert not missing, f"symbol {sym}: {len(missing)} sequences never reached the caller"
        compared += len(theirs)
    assert compared > 1000 and tally.requests > 0, (compared, tally.requests)
    seconds = float(peer["seconds"])  # type: ignore[arg-type]
    sent = int(peer["sent"])  # type: ignore[call-overload]
    return (
        f"{tally.prices} prices in {seconds:.1f} s ({tally.prices / seconds:,.0f}/s at the "
        f"caller, {sent / seconds:,.0f} quotes/s sent), {tally.requests} requests "
        f"({tally.shed} shed by the server), {compared} sequences compared, "
        f"{tally.conflated} conflated snapshots ({stats.conflated} prices conflated in the "
        f"inbox), load {os.getloadavg()[0]:.1f}"
    )


def report(capsys: pytest.CaptureFixture[str], name: str, line: str) -> None:
    with capsys.disabled():
        print(f"\n  stream[{name}]: {line}")


def sync_session_run(srv: Server, seconds: float) -> str:
    """The README's pattern: a recv() loop with requests in between."""
    sess = Session("127.0.0.1", srv.port)
    sess.logon()
    assert all(r.ok for r in sess.subscribe(SYMBOLS, TIER).results)
    peer = Peer(srv, seconds)
    peer.go()
    tally, last = Tally(), time.monotonic()
    while peer.running or time.monotonic() - last < QUIET_S:  # bounded by the peer
        msg = sess.recv(0.2)
        if not isinstance(msg, Price):
            continue
        last = time.monotonic()
        if tally.add(msg) and peer.running:
            try:
                sess.snapshot(SYMBOLS, TIER)
                sess.history(msg.symbol_id, 5)
                sess.symbols()
                tally.requests += 3
            except RequestRejected as err:
                tally.rejected(err)
    line = verdict(tally, peer.result(), sess.stats, sess.tracker.gaps)
    sess.close()
    return line


def sync_subscriber_run(srv: Server, seconds: float) -> str:
    """The failing-over Subscriber: events, requests on its current session."""
    with Subscriber([("127.0.0.1", srv.port)]) as sub:
        sub.subscribe(SYMBOLS, TIER)
        while not sub.connected:
            assert sub.next_event(5.0) is not None
        peer = Peer(srv, seconds)
        peer.go()
        tally, last = Tally(), time.monotonic()
        while peer.running or time.monotonic() - last < QUIET_S:  # bounded by the peer
            ev = sub.next_event(0.2)
            if ev is None or ev.price is None:
                continue
            last = time.monotonic()
            if tally.add(ev.price) and peer.running:
                try:
                    sub.snapshot(SYMBOLS, TIER)
                    sub.history(ev.price.symbol_id, 5)
                    sub.symbols()
                    tally.requests += 3
                except RequestRejected as err:
                    tally.rejected(err)
        assert sub.session is not None and sub.logons == 1, "the session was lost"
        return verdict(tally, peer.result(), sub.session.stats, sub.tracker.gaps)


async def aio_subscriber_run(srv: Server, seconds: float) -> str:
    """``async with connect(...)``, ``async for price in s.prices()``, awaited requests."""
    async with aio.connect(f"127.0.0.1:{srv.port}") as s:
        await s.subscribe(SYMBOLS, TIER)
        peer = Peer(srv, seconds)
        peer.go()
        tally, last = Tally(), time.monotonic()
        while peer.running or time.monotonic() - last < QUIET_S:  # bounded by the peer
            ev = await s.next_event(0.2)
            if ev is None or ev.price is None:
                continue
            last = time.monotonic()
            if tally.add(ev.price) and peer.running:
                try:
                    await s.snapshot(SYMBOLS, TIER)
                    await s.history(ev.price.symbol_id, 5)
                    await s.symbols()
                    tally.requests += 3
                except RequestRejected as err:
                    tally.rejected(err)
        assert s.session is not None and s.logons == 1, "the session was lost"
        return verdict(tally, peer.result(), s.session.stats, s.tracker.gaps)


async def aio_session_run(srv: Server, seconds: float) -> str:
    """One asyncio Session: ``async for price in s`` with awaited requests."""
    async with await aio.Session.open("127.0.0.1", srv.port) as s:
        await s.logon()
        await s.subscribe(SYMBOLS, TIER)
        peer = Peer(srv, seconds)
        peer.go()
        tally, last = Tally(), time.monotonic()
        while peer.running or time.monotonic() - last < QUIET_S:  # bounded by the peer
            msg = await s.recv(0.2)
            if not isinstance(msg, Price):
                continue
            last = time.monotonic()
            if tally.add(msg) and peer.running:
                answers = await asyncio.gather(
                    s.snapshot(SYMBOLS, TIER),
                    s.history(msg.symbol_id, 5),
                    s.symbols(),
                    return_exceptions=True,
                )  # pipelined: three answers matched by request id
                tally.requests += 3
                for answer in answers:
                    if isinstance(answer, RequestRejected):
                        tally.rejected(answer)
                    elif isinstance(answer, BaseException):
                        raise answer
        return verdict(tally, peer.result(), s.stats, s.tracker.gaps)


def test_sync_session_loses_no_price_while_requests_wait(
    fast_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    report(capsys, "sync Session", sync_session_run(fast_server, SECONDS))


def test_aio_subscriber_loses_no_price_while_requests_wait(
    fast_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    report(capsys, "aio connect", asyncio.run(aio_subscriber_run(fast_server, SECONDS)))


def test_sync_subscriber_loses_no_price_while_requests_wait(
    fast_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    report(capsys, "sync Subscriber", sync_subscriber_run(fast_server, SHORT_S))


def test_aio_session_loses_no_price_with_pipelined_requests(
    fast_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    report(capsys, "aio Session", asyncio.run(aio_session_run(fast_server, SHORT_S)))
