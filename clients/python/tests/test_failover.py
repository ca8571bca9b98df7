"""Failover between the edges of one core, against real processes: a nats-server with
JetStream, a ``pricewire serve --role core`` fed by a provider on its ingest port, and two
``--role edge`` servers. A :class:`Subscriber` listing both edges must come back on the
other edge when its edge is killed (SIGKILL) and resume by sequence: one ``resumed``
snapshot per symbol and no resync when no price was missed; and after the first edge
comes back and the second is killed, it rotates back with a resync only for the symbol
that really missed prices.

Prices move only when the test quotes (no synthetic feed; the core's max quote age and the
edges' max age are far above the test's length, so nothing turns stale on its own), so
what the terminal missed while away is exactly what the test quoted meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pricewire_client import ProviderSession, Quote, Session
from pricewire_client.reconnect import Backoff, ReconnectPolicy
from pricewire_client.subscriber import Event, Subscriber

from aio_bridge import AioSubscriber
from nats import NatsServer
from server import Server

SYMBOLS = {"EURUSD": 0, "GBPUSD": 1, "USDJPY": 2}
BASE_BID = {0: 108_100, 1: 126_100, 2: 150_100}
TIER = 0  # raw: the provider's own prices
HEARTBEAT_MS = 5_000  # dead after 15 s: the test may pause reading while a server starts
WAIT_S = 15.0
PREFIX = "pyfailover"


class Feed(threading.Thread):
    """Provider 0 on the core: quotes when asked, heartbeats in between."""

    def __init__(self, core: Server) -> None:
        super().__init__(daemon=True)
        self.provider = ProviderSession("127.0.0.1", core.feed_port)
        self.provider.logon(0, "demo-feed")
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.bid = dict(BASE_BID)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.wait(0.1):
                with self.lock:
                    self.provider.recv(0.01)  # heartbeats while idle; drains the server's
        except BaseException as err:  # noqa: BLE001 - reported by the test
            self.error = err

    def move(self, symbol: int) -> int:
        """Quote ``symbol`` one point higher: exactly one new price (one seq); the bid."""
        with self.lock:
            self.bid[symbol] += 1
            bid = self.bid[symbol]
            self.provider.quote([Quote(symbol, bid, bid + 30, provider_time_ns=time.time_ns())])
        return bid


def observer(edge: Server) -> Session:
    """A plain session on ``edge`` subscribed to SYMBOLS at TIER: what the edge holds."""
    sess = Session("127.0.0.1", edge.port)
    sess.logon(heartbeat_ms=HEARTBEAT_MS)
    answer = sess.subscribe(list(SYMBOLS.values()), TIER)
    assert all(r.ok for r in answer.results), answer
    return sess


def until_bid(sess: Session, symbol: int, bid: int) -> None:
    """Read ``sess`` until its last price of ``symbol`` has ``bid``."""

    def has() -> bool:
        last = sess.latest.get((symbol, TIER))
        return last is not None and last.bid == bid

    if not has():
        sess.wait_for(lambda m: has(), WAIT_S)
    assert has(), f"{sess.latest.get((symbol, TIER))} never reached bid {bid}"


def pump(sub: Any, done: Callable[[list[Event]], bool]) -> list[Event]:
    """The subscriber's events until ``done`` holds for them (bounded by WAIT_S)."""
    got: list[Event] = []
    deadline = time.monotonic() + WAIT_S
    while not done(got):
        left = deadline - time.monotonic()
        assert left > 0, f"timed out; events {[(e.kind, e.status, e.reason) for e in got]}"
        ev = sub.next_event(min(left, 0.5))
        if ev is not None:
            assert ev.kind != "closed", ev.reason
            got.append(ev)
    return got


def prices_after_logon(events: list[Event]) -> list[Event]:
    """The price events after the last logon."""
    logons = [i for i, e in enumerate(events) if e.kind == "logon"]
    return [e for e in events[logons[-1] :] if e.kind == "price"] if logons else []


def has_prices_of_every_symbol(events: list[Event]) -> bool:
    return len(prices_after_logon(events)) >= len(SYMBOLS)


def edge(tmp: Path, bus: NatsServer, port: int | None = None) -> Server:
    """An edge on ``bus``; ready only once it loaded the last values."""
    args = ["--bus-prefix", PREFIX, "--bus-max-age-ms", "600000"]
    return Server(tmp, args, role="edge", bus=bus.url, port=port)


class Pair:
    """A core fed by a :class:`Feed`, two edges, and a Subscriber listing both edges."""

    def __init__(self, tmp: Path, bus: NatsServer, api: str) -> None:
        self.tmp, self.bus = tmp, bus
        core_args = ["--bus-prefix", PREFIX, "--max-quote-age-ms", "600000"]
        self.core = Server(tmp, core_args, role="core", bus=bus.url)
        # The feed first, one quote per symbol: a core with no fresh feed
        # does not take the lease (health-aware leadership), and an edge is
        # ready only once it hears the leading core.
        self.feed = Feed(self.core)
        self.feed.start()
        for symbol in BASE_BID:
            self.feed.move(symbol)
        self.edges = [edge(tmp, bus), edge(tmp, bus)]
        kind: Any = AioSubscriber if api == "aio" else Subscriber
        self.sub = kind(
            [self.address(0), self.address(1)],
            heartbeat_ms=HEARTBEAT_MS,
            policy=ReconnectPolicy(Backoff(20, 200), give_up_after_s=WAIT_S),
        )

    def address(self, i: int) -> tuple[str, int]:
        return ("127.0.0.1", self.edges[i].port)

    def close(self) -> None:
        self.sub.close()
        self.feed.stop_event.set()
        self.feed.join(5)
        for srv in (*self.edges, self.core):
            srv.crash()


@pytest.fixture
def pair(tmp_path: Path, api: str) -> Iterator[Pair]:
    """A nats-server with JetStream, a core and two edges; all killed afterwards. The
    terminal is a Subscriber of the API under test."""
    bus = NatsServer(tmp_path)
    try:
        pair = Pair(tmp_path, bus, api)
        try:
            yield pair
        finally:
            pair.close()
        assert pair.feed.error is None, pair.feed.error
    finally:
        bus.stop()


def moves_to(pair: Pair, i: int) -> dict[int, str]:
    """Read until the subscriber logged on again and has a price of every symbol; checks
    it is on edge ``i``; each symbol's status on the new session."""
    events = pump(pair.sub, has_prices_of_every_symbol)
    # Prices the old edge delivered before it died may come first.
    first = next(e for e in events if e.kind != "price")
    assert first.kind == "disconnected" and "connection lost" in first.reason
    logon = [e for e in events if e.kind == "logon"][-1]
    assert logon.address == pair.address(i)
    return {e.price.symbol_id: e.status for e in prices_after_logon(events) if e.price}


def test_a_killed_edge_moves_its_terminal_to_the_other_resuming_by_sequence(
    pair: Pair,
) -> None:
    feed, sub, edges = pair.feed, pair.sub, pair.edges
    for sym in SYMBOLS.values():
        feed.move(sym)
    watch2 = observer(edges[1])
    sub.subscribe(list(SYMBOLS), TIER)
    # Prices flow on edge 1; edge 2 holds the same sequences as the terminal.
    for _ in range(3):
        for sym in SYMBOLS.values():
            feed.move(sym)
    current = {(s, TIER): bid for s, bid in feed.bid.items()}
    pump(sub, lambda _: {k: p.bid for k, p in sub.latest.items()} == current)
    for sym, bid in feed.bid.items():
        until_bid(watch2, sym, bid)
    held = dict(sub.tracker.expected)
    assert held == watch2.tracker.expected, "the edges send the core's sequences"

    # Edge 1 dies: the terminal comes back on edge 2, missing nothing.
    edges[0].crash()
    assert moves_to(pair, 1) == {s: "resumed" for s in SYMBOLS.values()}
    t = sub.tracker
    assert (t.resumed, t.resume_resyncs, t.gaps) == (len(SYMBOLS), 0, [])
    assert t.expected == held, "the sequences did not move"


def test_only_a_symbol_that_missed_prices_is_resynced_after_a_move(pair: Pair) -> None:
    feed, sub, edges = pair.feed, pair.sub, pair.edges
    for sym in SYMBOLS.values():
        feed.move(sym)
    sub.subscribe(list(SYMBOLS), TIER)
    pump(sub, lambda _: len(sub.latest) == len(SYMBOLS))
    watch2 = observer(edges[1])
    for sym, bid in feed.bid.items():
        until_bid(watch2, sym, bid)
    edges[0].crash()
    assert moves_to(pair, 1) == {s: "resumed" for s in SYMBOLS.values()}
    # Edge 1 comes back on its port; edge 2 dies; while the terminal is away EURUSD moves
    # twice (a real gap), GBPUSD once (the snapshot is that price), USDJPY not at all.
    edges[0] = edge(pair.tmp, pair.bus, port=edges[0].port)
    sub.next_event(0.1)  # heartbeat to edge 2 after the pause
    watch1 = observer(edges[0])
    for sym, bid in feed.bid.items():
        until_bid(watch1, sym, bid)
    hold = getattr(sub, "hold", None)  # an asyncio terminal reconnects by itself: hold it
    if hold is not None:
        hold()
    edges[1].crash()
    for sym, moves in ((0, 2), (1, 1)):
        for _ in range(moves):
            until_bid(watch1, sym, feed.move(sym))
    if hold is not None:
        sub.release()
    assert moves_to(pair, 0) == {0: "resync", 1: "resumed", 2: "resumed"}, "rotated back"
    t = sub.tracker
    assert (t.resumed, t.resume_resyncs, t.gaps) == (len(SYMBOLS) + 2, 1, [])
    assert t.expected == watch1.tracker.expected
    assert (sub.logons, sub.disconnects) == (3, 2)
