"""Small helpers shared by the conformance tests."""

from __future__ import annotations

import time
from collections.abc import Callable

from pricewire_client import ConnectionClosed, Message, ProviderSession, Quote, Session, messages
from pricewire_client.session import Connection

from server import Server

ANSWER_TIMEOUT_S = 3.0


def connect(srv: Server) -> Session:
    """A subscriber connection, not logged on."""
    return Session("127.0.0.1", srv.port)


def logged_on(srv: Server, heartbeat_ms: int = 0) -> Session:
    """A logged-on demo session."""
    sess = connect(srv)
    sess.logon(heartbeat_ms=heartbeat_ms)
    return sess


def release(conn: Connection, timeout_s: float = ANSWER_TIMEOUT_S) -> None:
    """Log out and wait until the server closes: a provider id is free again for the next
    test only once the server has ended the session holding it (§7: one session per id)."""
    if conn.closed:
        return
    try:
        conn.send(messages.logout())
        conn.wait_closed(timeout_s)
    except (OSError, ConnectionClosed, TimeoutError):
        pass
    conn.close()


def next_named(conn: Connection, *names: str, timeout_s: float = ANSWER_TIMEOUT_S) -> Message:
    """The next message with one of ``names``; fails the test on timeout."""
    msg = conn.wait_for(lambda m: m.name in names, timeout_s)
    assert msg is not None, f"no {names} within {timeout_s} s"
    return msg


def until_closed(conn: Connection, timeout_s: float = ANSWER_TIMEOUT_S) -> list[Message]:
    """Everything received until the server closes (fails if it does not)."""
    return conn.wait_closed(timeout_s)


def names(msgs: list[Message]) -> list[str]:
    """Message names, for assertion messages."""
    return [m.name for m in msgs]


def quote_until(
    sess: Session,
    prov: ProviderSession,
    quote: Quote,
    want: str,
    timeout_s: float = ANSWER_TIMEOUT_S,
) -> Message:
    """Send ``quote`` and wait for the first ``want`` price of its symbol on ``sess``."""
    prov.quote([quote])
    msg = sess.wait_for(
        lambda m: m.name == want and m.int("symbolId") == quote.symbol_id, timeout_s
    )
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
