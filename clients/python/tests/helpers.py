"""Small helpers shared by the conformance tests.

``API`` names the client API the current test runs against (``"sync"`` or ``"aio"``; set
by the ``api`` fixture): :func:`new_session` and :func:`new_provider` make a
:class:`pricewire_client.Session` / :class:`~pricewire_client.ProviderSession`, or their
asyncio twins behind :mod:`aio_bridge`'s blocking face.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pricewire_client import (
    Incoming,
    PricewireError,
    ProviderSession,
    Quote,
    Session,
    messages,
)

from aio_bridge import AioProviderSession, AioSession
from server import Server

ANSWER_TIMEOUT_S = 3.0
API = "sync"
"""The API under test: "sync" or "aio" (set by the ``api`` fixture)."""

Sess = Any  # Session | AioSession: the same methods
Prov = Any  # ProviderSession | AioProviderSession


def new_session(host: str, port: int, **kw: Any) -> Sess:
    """A subscriber connection of the API under test, not logged on."""
    return AioSession(host, port, **kw) if API == "aio" else Session(host, port, **kw)


def new_provider(host: str, port: int, **kw: Any) -> Prov:
    """A provider connection of the API under test, not logged on."""
    if API == "aio":
        return AioProviderSession(host, port, **kw)
    return ProviderSession(host, port, **kw)


def connect(srv: Server, **kw: Any) -> Sess:
    """A subscriber connection to ``srv``, not logged on."""
    return new_session("127.0.0.1", srv.port, **kw)


def logged_on(srv: Server, heartbeat_ms: int = 0) -> Sess:
    """A logged-on demo session."""
    sess = connect(srv)
    sess.logon(heartbeat_ms=heartbeat_ms)
    return sess


def write_raw(sess: Sess, data: bytes) -> None:
    """Write bytes straight to the connection (safe from another thread than the reader)."""
    if isinstance(sess, AioSession):
        sess.send(data)
    else:
        sess.transport.sock.sendall(data)


def release(conn: Sess, timeout_s: float = ANSWER_TIMEOUT_S) -> None:
    """Log out and wait until the server closes: a provider id is free again for the next
    test only once the server has ended the session holding it (§7: one session per id)."""
    if conn.closed:
        return
    try:
        conn.send(messages.logout())
        conn.wait_closed(timeout_s)
    except (OSError, PricewireError, TimeoutError):
        pass
    conn.close()


def next_named(conn: Sess, *names: str, timeout_s: float = ANSWER_TIMEOUT_S) -> Any:
    """The next message with one of ``names``; fails the test on timeout."""
    msg = conn.wait_for(lambda m: m.name in names, timeout_s)
    assert msg is not None, f"no {names} within {timeout_s} s"
    return msg


def until_closed(conn: Sess, timeout_s: float = ANSWER_TIMEOUT_S) -> list[Incoming]:
    """Everything received until the server closes (fails if it does not)."""
    seen: list[Incoming] = conn.wait_closed(timeout_s)
    return seen


def names(msgs: list[Incoming]) -> list[str]:
    """Message names, for assertion messages."""
    return [m.name for m in msgs]


def quote_until(
    sess: Sess,
    prov: Prov,
    quote: Quote,
    want: str,
    timeout_s: float = ANSWER_TIMEOUT_S,
) -> Any:
    """Send ``quote`` and wait for the first ``want`` price of its symbol on ``sess``."""
    prov.quote([quote])
    msg = sess.wait_for(lambda m: m.name == want and m.symbol_id == quote.symbol_id, timeout_s)
    assert msg is not None, f"no {want} for symbol {quote.symbol_id}"
    return msg


def deadline_poll(check: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``check`` until true or the deadline; whether it became true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)  # polling interval of a bounded wait
    return check()
