"""Fixtures of the conformance suite: the real server, a provider, a good subscriber.

One server serves the whole run (tests that stop a server start their own). A background
feeder quotes EURUSD (symbol 0) through provider 0 so prices flow all the time, and a good
subscriber on EURUSD at every tier reads continuously and checks sequence numbers: the
bad-input tests run alongside it and it must see no gap.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pricewire_client import ConnectionLost, ProviderSession, Quote, Session

import helpers
from helpers import Prov, Sess, connect, new_provider, release
from server import Server

FEED_TOKEN = "demo-feed"
EURUSD = 0
FEED_PERIOD_S = 0.005


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The server every test shares (subscriber, ingest and ops ports)."""
    srv = Server(
        Path(tmp_path_factory.mktemp("pricewire")),
        [
            "--max-subscriptions", "64",
            "--logon-timeout-ms", "1500",
            "--slow-consumer-ms", "1000",
            "--ip-connect-burst", "1000",
            "--ip-connect-rate-per-s", "1000",
        ],
    )  # fmt: skip
    yield srv
    srv.stop()


def now_ns() -> int:
    """Wall clock in ns (provider timestamps are informational)."""
    return time.time_ns()


class Feeder(threading.Thread):
    """Quotes EURUSD every FEED_PERIOD_S, alternating two bids so every quote moves."""

    def __init__(self, srv: Server) -> None:
        super().__init__(daemon=True)
        self.provider = ProviderSession("127.0.0.1", srv.feed_port)
        self.provider.logon(0, FEED_TOKEN)
        self.stop_event = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.wait(FEED_PERIOD_S):
                bid = 108120 + (self.sent % 2)
                self.provider.quote([Quote(EURUSD, bid, 108130, provider_time_ns=now_ns())])
                self.provider.recv(0)  # drain heartbeats so the socket never fills
                self.sent += 1
        except BaseException as err:  # noqa: BLE001 - reported by the fixture
            self.error = err


class GoodSubscriber(threading.Thread):
    """Reads EURUSD at every tier without pause and records gaps."""

    def __init__(self, srv: Server) -> None:
        super().__init__(daemon=True)
        self.session = Session("127.0.0.1", srv.port)
        # A 5-s heartbeat (cut after 15 s of silence, not the default's 3):
        # this thread heartbeats between reads, and beside a flooding test
        # on a saturated CI host it was starved past 3 s and cut as a
        # silent peer — the test process's stall, not the server's fault.
        self.session.logon(heartbeat_ms=5000)
        for tier in (0, 1, 2):
            answer = self.session.subscribe([EURUSD], tier)
            assert all(r.ok for r in answer.results), answer
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                with self.lock:
                    self.session.recv(0.05)
        except ConnectionLost as err:
            self.error = err
        except BaseException as err:  # noqa: BLE001 - reported by the fixture
            self.error = err

    def accepted(self) -> int:
        """Prices accepted in sequence so far."""
        with self.lock:
            return self.session.tracker.accepted


@pytest.fixture(scope="session")
def feeder(server: Server) -> Iterator[Feeder]:
    """The background EURUSD feed."""
    feed = Feeder(server)
    feed.start()
    yield feed
    feed.stop_event.set()
    feed.join(5)


@pytest.fixture(scope="session")
def good_subscriber(server: Server, feeder: Feeder) -> Iterator[GoodSubscriber]:
    """A well-behaved subscriber that must never see a gap or lose its connection."""
    sub = GoodSubscriber(server)
    sub.start()
    yield sub
    sub.stop_event.set()
    sub.join(5)


@pytest.fixture
def alongside(good_subscriber: GoodSubscriber, feeder: Feeder) -> Iterator[GoodSubscriber]:
    """Run a test alongside the good subscriber; afterwards it must have seen no gap and
    still be receiving prices."""
    before = good_subscriber.accepted()
    yield good_subscriber
    deadline = time.monotonic() + 5
    while good_subscriber.accepted() <= before + 3 and time.monotonic() < deadline:
        time.sleep(0.01)  # polling interval of a bounded wait
    assert feeder.error is None, feeder.error
    assert good_subscriber.error is None, good_subscriber.error
    assert good_subscriber.session.tracker.gaps == []
    assert good_subscriber.accepted() > before + 3, "good subscriber stopped receiving"


@pytest.fixture(params=["sync", "aio"])
def api(request: pytest.FixtureRequest) -> Iterator[str]:
    """The client API a test runs against: the blocking one, then asyncio."""
    helpers.API = request.param
    yield request.param
    helpers.API = "sync"


@pytest.fixture
def session(server: Server, api: str) -> Iterator[Sess]:
    """A logged-on demo session of the API under test, closed after the test."""
    sess = connect(server)
    sess.logon()
    yield sess
    gaps = sess.tracker.gaps
    sess.close()
    assert gaps == [], "sequence gap on a test's session"


@pytest.fixture
def provider(server: Server, api: str) -> Iterator[Prov]:
    """A logged-on provider (id 1) of the API under test, closed after the test."""
    prov = new_provider("127.0.0.1", server.feed_port)
    prov.logon(1, FEED_TOKEN)
    yield prov
    release(prov)
