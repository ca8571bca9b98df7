"""Conformance under request overload (protocol.md §6): a server whose request queue is full
sheds requests with Reject(overloaded) and a retry floor, and every request still gets its
response or its Reject. The per-account and per-connection rate limits are raised on these
servers so that the request path, not the rate limiter, is what overflows."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pricewire_client import (
    ConnectionLost,
    Incoming,
    ProviderSession,
    Quote,
    Reject,
    RejectReason,
    Session,
    encode,
    messages,
)

from conftest import FEED_TOKEN
from helpers import connect, release, write_raw
from server import Server

pytestmark = pytest.mark.usefixtures("api")

UNLIMITED = [
    "--account-request-rate-per-s", "1000000", "--account-request-burst", "1000000",
    "--msg-rate-per-s", "1000000", "--msg-burst", "1000000",
]  # fmt: skip
PIPELINES = 8  # connections pipelining at once
QUIET_S = 2.0  # answers stop for this long: the server has said all it will say


def priced(srv: Server) -> Server:
    """Quote every symbol once, so snapshot answers are full size (25 prices, 1.6 KB)."""
    prov = ProviderSession("127.0.0.1", srv.feed_port)
    prov.logon(1, FEED_TOKEN)
    prov.quote([Quote(s, 100_000, 100_010) for s in range(25)])
    sess = Session("127.0.0.1", srv.port)
    sess.logon()
    deadline = time.monotonic() + 3
    while len(sess.snapshot(list(range(25))).prices) < 25:
        assert time.monotonic() < deadline, "quotes never priced"
    sess.close()
    release(prov)
    return srv


def pipelined_answers(srv: Server, count: int) -> tuple[dict[int, Incoming], bool]:
    """Send ``count`` 25-symbol SnapshotRequests in one write; the answers by requestId and
    whether the connection was closed without a Disconnect."""
    sess = connect(srv)
    sess.logon()
    data = b"".join(encode(messages.snapshot_request(i + 1, list(range(25)))) for i in range(count))
    threading.Thread(target=write_raw, args=(sess, data), daemon=True).start()
    answers: dict[int, Incoming] = {}
    last = time.monotonic()
    try:
        while time.monotonic() - last < QUIET_S and len(answers) < count:
            msg = sess.recv(0.5)
            if msg is not None and msg.name in ("SnapshotResponse", "Reject"):
                answers[msg.request_id] = msg  # type: ignore[union-attr]
                last = time.monotonic()
            elif msg is not None and msg.name == "Disconnect":
                return answers, False
    except ConnectionLost:
        return answers, True
    sess.close()
    return answers, False


@pytest.fixture(scope="module")
def small_queue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose request queue holds 16 requests."""
    srv = Server(
        Path(tmp_path_factory.mktemp("small-queue")), UNLIMITED + ["--queue-capacity", "16"]
    )
    yield priced(srv)
    srv.stop()


@pytest.fixture(scope="module")
def default_queue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with the default request queue."""
    srv = Server(Path(tmp_path_factory.mktemp("default-queue")), UNLIMITED)
    yield priced(srv)
    srv.stop()


def test_full_request_queue_is_rejected_overloaded(small_queue: Server) -> None:
    """Eight connections pipelining at once overflow a 16-request queue. One connection
    alone cannot: the server takes its requests only while their answers fit (§6)."""
    with ThreadPoolExecutor(PIPELINES) as pool:
        runs = list(pool.map(lambda _: pipelined_answers(small_queue, 250), range(PIPELINES)))
    for answers, closed_silently in runs:
        assert not closed_silently
        assert len(answers) == 250
    shed = [m for answers, _ in runs for m in answers.values() if isinstance(m, Reject)]
    assert shed and all(m.reason == RejectReason.OVERLOADED for m in shed)
    assert all(m.retry_after_ms > 0 for m in shed)
    assert len({m.retry_after_ms for m in shed}) > 1  # jittered


def test_every_pipelined_request_is_answered(default_queue: Server) -> None:
    """§6: every request's id is echoed in its response or Reject."""
    answers, closed_silently = pipelined_answers(default_queue, 2000)
    assert not closed_silently, "closed without Disconnect"
    assert len(answers) == 2000, f"{2000 - len(answers)} requests never answered"
