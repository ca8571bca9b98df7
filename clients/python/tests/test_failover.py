"""Failover between the edges of one core, against real processes: a nats-server with
JetStream, a ``pricewire serve --role core`` fed by a provider on its ingest port, and two
``--role edge`` servers. A :class:`Subscriber` listing both edges must come back on the
other edge when its edge is killed (SIGKILL) and resume by sequence: one ``resumed``
snapshot per symbol and no resync when no price was missed, a resync only for the symbol
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

import pytest

from pricewire_client import ProviderSession, Quote, Session
from pricewire_client.reconnect import Backoff, ReconnectPolicy
from pricewire_client.subscriber import Event, Subscriber

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
    assert answer.name == "SubscribeResponse", answer
    return sess


def until_bid(sess: Session, symbol: int, bid: int) -> None:
    """Read ``sess`` until its last price of ``symbol`` has ``bid``."""

    def has() -> bool:
        last = sess.prices.get((symbol, TIER))
        return last is not None and last.int("bid") == bid

    if not has():
        sess.wait_for(lambda m: has(), WAIT_S)
    assert has(), f"{sess.prices.get((symbol, TIER))} never reached bid {bid}"


def pump(sub: Subscriber, done: Callable[[list[Event]], bool]) -> list[Event]:
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


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[NatsServer]:
    """One nats-server with JetStream."""
    node = NatsServer(tmp_path)
    yield node
    node.stop()


def edge(tmp: Path, bus: NatsServer, port: int | None = None) -> Server:
    """An edge on ``bus``; ready only once it loaded the last values."""
    args = ["--bus-prefix", PREFIX, "--bus-max-age-ms", "600000"]
    return Server(tmp, args, role="edge", bus=bus.url, port=port)


def test_a_killed_edge_moves_its_terminal_to_the_other_resuming_by_sequence(
    tmp_path: Path, bus: NatsServer
) -> None:
    core_args = ["--bus-prefix", PREFIX, "--max-quote-age-ms", "600000"]
    core = Server(tmp_path, core_args, role="core", bus=bus.url)
    edges = [edge(tmp_path, bus), edge(tmp_path, bus)]
    feed = Feed(core)
    feed.start()
    sub = Subscriber(
        [("127.0.0.1", e.port) for e in edges],
        heartbeat_ms=HEARTBEAT_MS,
        policy=ReconnectPolicy(Backoff(20, 200), give_up_after_s=WAIT_S),
    )
    try:
        for sym in SYMBOLS.values():
            feed.move(sym)
        watch2 = observer(edges[1])
        sub.subscribe(list(SYMBOLS), TIER)
        # Prices flow on edge 1; edge 2 holds the same sequences as the terminal.
        for _ in range(3):
            for sym in SYMBOLS.values():
                feed.move(sym)
        current = {(s, TIER): bid for s, bid in feed.bid.items()}
        pump(sub, lambda _: {k: p.int("bid") for k, p in sub.prices.items()} == current)
        for sym, bid in feed.bid.items():
            until_bid(watch2, sym, bid)
        held = dict(sub.tracker.expected)
        assert held == watch2.tracker.expected, "the edges send the core's sequences"

        # Edge 1 dies: the terminal comes back on edge 2, missing nothing.
        edges[0].crash()
        moved = pump(sub, has_prices_of_every_symbol)
        assert moved[0].kind == "disconnected" and "connection lost" in moved[0].reason
        logon = [e for e in moved if e.kind == "logon"][-1]
        assert logon.address == ("127.0.0.1", edges[1].port)
        assert [e.status for e in prices_after_logon(moved)] == ["resumed"] * len(SYMBOLS)
        t = sub.tracker
        assert (t.resumed, t.resume_resyncs, t.gaps) == (len(SYMBOLS), 0, [])
        assert t.expected == held, "the sequences did not move"

        # Edge 1 comes back; edge 2 dies; while the terminal is away EURUSD moves twice
        # (a real gap), GBPUSD once (the snapshot is that price) and USDJPY not at all.
        edges[0] = edge(tmp_path, bus, port=edges[0].port)
        sub.next_event(0.1)  # heartbeat to edge 2 after the pause
        watch1 = observer(edges[0])
        for sym, bid in feed.bid.items():
            until_bid(watch1, sym, bid)
        edges[1].crash()
        for sym, moves in ((0, 2), (1, 1)):
            for _ in range(moves):
                until_bid(watch1, sym, feed.move(sym))
        back = pump(sub, has_prices_of_every_symbol)
        logon = [e for e in back if e.kind == "logon"][-1]
        assert logon.address == ("127.0.0.1", edges[0].port), "rotated back to the first"
        status = {e.msg.int("symbolId"): e.status for e in prices_after_logon(back) if e.msg}
        assert status == {0: "resync", 1: "resumed", 2: "resumed"}
        assert (t.resumed, t.resume_resyncs, t.gaps) == (len(SYMBOLS) + 2, 1, [])
        assert t.expected == watch1.tracker.expected
        assert (sub.logons, sub.disconnects) == (3, 2)
        assert feed.error is None, feed.error
    finally:
        sub.close()
        feed.stop_event.set()
        feed.join(5)
        for srv in (*edges, core):
            srv.crash()

