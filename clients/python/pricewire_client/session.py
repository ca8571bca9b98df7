"""Synchronous subscriber and provider sessions over one connection each.

A :class:`Session` moves bytes between a socket and a
:class:`~pricewire_client.core.SessionCore` and adds blocking calls. Nothing is lost
between calls: prices that arrive while :meth:`Session.snapshot` (or any request) waits for
its answer are kept, in order, and returned by the next :meth:`Session.recv` (or yielded by
:meth:`Session.prices`); answers are matched to their request by ``requestId``, and a
Reject is raised as :class:`~pricewire_client.errors.RequestRejected` by the request it
answers.

Every call takes a timeout and never blocks past it. There is no background thread: the
session reads, heartbeats (when it sent nothing for the interval from LogonAccepted) and
notices a dead peer (silent for 3 intervals) while one of its calls runs, so a program
should call :meth:`Session.recv` (or iterate) regularly; requests wait by reading too.
A Session is not thread-safe: use it from one thread (or lock around it).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Self, TypeVar

from . import messages, schema
from .codec import Message
from .core import INBOX_MAX, SessionCore, SessionStats
from .errors import ConnectionLost, LogonRefused, PricewireError, RequestTimeout
from .model import (
    Answer,
    Disconnect,
    HistoryResponse,
    Incoming,
    LogonAccepted,
    Price,
    SnapshotResponse,
    SubscribeResponse,
    SymbolDirectory,
)
from .tracker import Key, SeqTracker
from .transport import Connector, SocketTransport, Transport

__all__ = ["ConnectionClosed", "Connection", "LogonRefused", "ProviderSession", "Session"]

ConnectionClosed = ConnectionLost
log = logging.getLogger(__name__)
T = TypeVar("T")
TIMEOUT_S = 5.0
CLOSE_TIMEOUT_S = 1.0


def open_transport(
    host: str,
    port: int,
    timeout_s: float,
    *,
    tls: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    rcvbuf: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SocketTransport:
    """A connected transport to (host, port) within ``timeout_s`` (TLS handshake included)."""
    conn = Connector(
        host, port, timeout_s, clock(), tls=tls, server_hostname=server_hostname, rcvbuf=rcvbuf
    )
    while (sock := conn.poll(timeout_s, clock())) is None:
        pass
    return SocketTransport(sock)


class Connection:
    """One framed connection with bounded waits and idle heartbeats: the part of
    :class:`Session` and :class:`ProviderSession` that moves bytes.

    ``host``/``port`` are connected to within ``timeout_s`` (TLS with ``tls``, an
    :class:`ssl.SSLContext`, checked against ``server_hostname``, default ``host``); or pass
    ``transport`` (a :class:`~pricewire_client.transport.Transport`) to use one already
    open. ``clock`` (seconds, monotonic) times every wait and heartbeat.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9400,
        timeout_s: float = TIMEOUT_S,
        *,
        rcvbuf: int | None = None,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        tracker: SeqTracker | None = None,
        inbox_max: int = INBOX_MAX,
        transport: Transport | None = None,
    ) -> None:
        self.clock = clock
        self.timeout_s = timeout_s
        self.address = (host, port)
        self.core = SessionCore(tracker, now=clock(), inbox_max=inbox_max)
        if transport is None:
            transport = open_transport(
                host,
                port,
                timeout_s,
                tls=tls,
                server_hostname=server_hostname,
                rcvbuf=rcvbuf,
                clock=clock,
            )
        self.transport = transport

    # ---- state ------------------------------------------------------------------------

    @property
    def tracker(self) -> SeqTracker:
        """The sequence tracker (shared with a Subscriber across its sessions)."""
        return self.core.tracker

    @tracker.setter
    def tracker(self, tracker: SeqTracker) -> None:
        self.core.tracker = tracker

    @property
    def heartbeat_ms(self) -> int:
        """The heartbeat interval in use (from LogonAccepted; set 0 to stop heartbeating
        and the dead-peer check)."""
        return self.core.heartbeat_ms

    @heartbeat_ms.setter
    def heartbeat_ms(self, value: int) -> None:
        self.core.heartbeat_ms = value

    @property
    def accepted(self) -> LogonAccepted | None:
        """The LogonAccepted of this session (None before logon)."""
        return self.core.accepted

    @property
    def stats(self) -> SessionStats:
        """Counters: frames, prices, skipped frames, conflated prices, ..."""
        return self.core.stats

    @property
    def latest(self) -> dict[Key, Price]:
        """The newest price received per (symbol, tier)."""
        return self.core.latest

    @property
    def closed(self) -> bool:
        """True once the connection ended (or was closed)."""
        return self.core.error is not None

    @property
    def error(self) -> PricewireError | None:
        """Why the connection ended (None while open)."""
        return self.core.error

    def request_id(self) -> int:
        """A fresh request id (for requests sent with :meth:`send`)."""
        return self.core.request_id()

    # ---- moving bytes -----------------------------------------------------------------

    def send(self, msg: Message | bytes) -> None:
        """Send one message (or raw bytes, for tests) now; the connection's error if it
        already ended."""
        self.core.raise_if_failed()
        self.core.send(msg, self.clock())
        self._flush()

    def _flush(self) -> None:
        data = self.core.outgoing()
        if data and self.core.error is None:
            try:
                self.transport.send(data)
            except ConnectionLost as err:
                self.core.fail(err)
                raise

    def pump(self, deadline: float) -> None:
        """Read once, waiting at most until ``deadline`` (a ``clock`` value) or the next
        heartbeat, then send what is due. An ended connection is kept in :attr:`error`."""
        now = self.clock()
        wait = deadline - now
        due = self.core.next_timer()
        if due is not None:
            wait = min(wait, due - now)
        try:
            data = self.transport.recv(max(wait, 0.0))
        except ConnectionLost as err:
            self.core.connection_lost(str(err))
            return
        now = self.clock()
        if data:
            self.core.receive(data, now)
        self.core.timer(now)
        try:
            self._flush()
        except ConnectionLost:
            pass  # kept in core.error: raised once the inbox is read

    def _until(self, check: Callable[[], T | None], timeout_s: float, what: str) -> T:
        """Read until ``check`` returns a value; RequestTimeout after ``timeout_s``."""
        deadline = self.clock() + timeout_s
        while (result := check()) is None:
            if self.clock() >= deadline:
                raise RequestTimeout(f"{what}: no answer within {timeout_s:g} s")
            self.pump(deadline)
        return result

    def recv(self, timeout_s: float) -> Incoming | None:
        """The next message not claimed by a request, or None when ``timeout_s`` passes
        first (0: only what has arrived). Raises the error that ended the connection
        (:class:`~pricewire_client.errors.ConnectionLost`,
        :class:`~pricewire_client.errors.ProtocolError`) once every message received
        before it was returned."""
        deadline = self.clock() + timeout_s
        pumped = False
        while True:
            item = self.core.pop()
            if item is not None:
                return item
            self.core.raise_if_failed()
            if pumped and self.clock() >= deadline:
                return None
            self.pump(deadline)
            pumped = True

    def wait_for(self, pred: Callable[[Incoming], bool], timeout_s: float) -> Incoming | None:
        """The first message matching ``pred`` within ``timeout_s``, else None.

        Messages that do not match are **discarded** (a test helper, and a way to skip
        ahead): use :meth:`recv` to see every message.
        """
        deadline = self.clock() + timeout_s
        while (left := deadline - self.clock()) > 0:
            msg = self.recv(left)
            if msg is not None and pred(msg):
                return msg
        return None

    def wait_closed(self, timeout_s: float) -> list[Incoming]:
        """Read until the connection ends; the messages received meanwhile.

        Raises :class:`~pricewire_client.errors.RequestTimeout` if it is still open
        after ``timeout_s``.
        """
        seen: list[Incoming] = []
        deadline = self.clock() + timeout_s
        try:
            while (left := deadline - self.clock()) > 0:
                msg = self.recv(left)
                if msg is not None:
                    seen.append(msg)
        except PricewireError:
            return seen
        raise RequestTimeout(f"still open after {timeout_s} s; received {[m.name for m in seen]}")

    def _logon_with(self, msg: Message, timeout_s: float | None) -> LogonAccepted:
        self.core.start_logon(msg, self.clock())
        self._flush()
        wait = self.timeout_s if timeout_s is None else timeout_s
        return self._until(self.core.logon_result, wait, msg.name)

    def close(self) -> None:
        """Close the connection (idempotent); no Logout is sent (see ``logout``)."""
        self.core.fail(ConnectionLost("closed by the client"))
        self.transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Session(Connection):
    """A subscriber session: logon, subscriptions with sequence checking, requests.

    ``with Session(host, port) as s:`` logs out (bounded by 1 s) and closes on exit.
    """

    def logon(
        self,
        account: str = "demo",
        token: str = "demo",
        heartbeat_ms: int = 0,
        timeout_s: float | None = None,
    ) -> LogonAccepted:
        """Log on (``heartbeat_ms`` 0: the server's default interval); the LogonAccepted.

        Raises :class:`~pricewire_client.errors.LogonRefused` (``.reason``,
        ``.retry_after``) or :class:`~pricewire_client.errors.RequestTimeout`.
        """
        accepted = self._logon_with(messages.logon(account, token, heartbeat_ms), timeout_s)
        log.info(
            "logged on at %s:%d: session %d, stream %d",
            *self.address,
            accepted.session_id,
            accepted.stream_id,
        )
        return accepted

    def start_logon(self, account: str, token: str, heartbeat_ms: int = 0) -> None:
        """Send the Logon without waiting; :meth:`poll_logon` reads its answer."""
        self.core.start_logon(messages.logon(account, token, heartbeat_ms), self.clock())
        self._flush()

    def poll_logon(self, timeout_s: float) -> LogonAccepted | None:
        """Read for at most ``timeout_s``: the LogonAccepted once it came, else None.
        Raises as :meth:`logon` does, and the connection's error."""
        deadline = self.clock() + timeout_s
        while (accepted := self.core.logon_result()) is None and self.clock() < deadline:
            self.pump(deadline)
        return accepted

    def request(self, build: Callable[[int], Message], timeout_s: float | None = None) -> Answer:
        """Send the request ``build`` makes for a fresh id and wait for its answer.

        Prices received meanwhile are kept for :meth:`recv`. After a Reject(rate_limited)
        a request waits for its floor first (reading meanwhile), or raises that Reject at
        once if the floor outlasts ``timeout_s``. Raises
        :class:`~pricewire_client.errors.RequestRejected` for a Reject,
        :class:`~pricewire_client.errors.RequestTimeout` (the answer, if it comes later,
        is dropped) or :class:`~pricewire_client.errors.ConnectionLost`.
        """
        wait = self.timeout_s if timeout_s is None else timeout_s
        deadline = self.clock() + wait
        if (quiet_s := self.core.quiet_left(self.clock(), wait)) > 0:
            self._hold(self.clock() + quiet_s)  # §4.2: the server's floor after rate_limited
        rid = self.core.start_request(build, self.clock())
        self._flush()
        while (answer := self.core.take_answer(rid)) is None:
            if self.clock() >= deadline:
                self.core.abandon(rid)
                raise RequestTimeout(f"request {rid}: no answer within {wait:g} s")
            self.pump(deadline)
        return answer

    def _hold(self, until: float) -> None:
        """Read (and heartbeat) until ``until``; prices are kept for :meth:`recv`."""
        while self.clock() < until and self.core.error is None:
            self.pump(until)

    def symbols(self, budget_us: int = 0, timeout_s: float | None = None) -> SymbolDirectory:
        """SymbolListRequest; the SymbolDirectory."""
        answer = self.request(lambda rid: messages.symbol_list_request(rid, budget_us), timeout_s)
        return _expect(answer, SymbolDirectory)

    def subscribe(
        self,
        symbols: Sequence[messages.SymbolRef],
        tier: int = schema.DEFAULT_TIER,
        timeout_s: float | None = None,
    ) -> SubscribeResponse:
        """Subscribe (symbols by id or name, ``tier`` 0xFF = the account's default); the
        SubscribeResponse (each ``ok`` entry's PriceSnapshot follows on the stream)."""
        answer = self.request(lambda rid: messages.subscribe(rid, symbols, tier), timeout_s)
        return _expect(answer, SubscribeResponse)

    def unsubscribe(
        self,
        symbols: Sequence[messages.SymbolRef],
        tier: int = schema.DEFAULT_TIER,
        timeout_s: float | None = None,
    ) -> SubscribeResponse:
        """Unsubscribe; the SubscribeResponse."""
        answer = self.request(lambda rid: messages.unsubscribe(rid, symbols, tier), timeout_s)
        return _expect(answer, SubscribeResponse)

    def snapshot(
        self,
        symbols: Sequence[int],
        tier: int = schema.DEFAULT_TIER,
        budget_us: int = 0,
        critical: bool = False,
        timeout_s: float | None = None,
    ) -> SnapshotResponse:
        """SnapshotRequest (at most 32 symbol ids); the SnapshotResponse."""
        answer = self.request(
            lambda rid: messages.snapshot_request(rid, symbols, tier, budget_us, critical),
            timeout_s,
        )
        return _expect(answer, SnapshotResponse)

    def history(
        self, symbol_id: int, count: int, budget_us: int = 0, timeout_s: float | None = None
    ) -> HistoryResponse:
        """HistoryRequest; the HistoryResponse (the newest ``count`` ticks, oldest first)."""
        answer = self.request(
            lambda rid: messages.history_request(rid, symbol_id, count, budget_us), timeout_s
        )
        return _expect(answer, HistoryResponse)

    def prices(self) -> Iterator[Price]:
        """Every price, in arrival order, until the session ends.

        Other messages are skipped. Ends quietly after :meth:`logout`; otherwise the end
        is raised (:class:`~pricewire_client.errors.ConnectionLost` with the Disconnect's
        reason, or :class:`~pricewire_client.errors.ProtocolError`).
        """
        while True:
            try:
                msg = self.recv(3600.0)
            except ConnectionLost:
                if self.core.logged_out:
                    return
                raise
            if isinstance(msg, Price):
                yield msg

    def __iter__(self) -> Iterator[Price]:
        return self.prices()

    def logout(self, timeout_s: float = TIMEOUT_S) -> Disconnect | None:
        """Logout; the Disconnect(logout) the server answers with (None if it just closed).
        Messages received before it are discarded."""
        try:
            self.send(messages.logout())
            disc = self.wait_for(lambda m: m.name == "Disconnect", timeout_s)
        except PricewireError:
            return None
        return disc if isinstance(disc, Disconnect) else None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.closed and self.accepted is not None:
            self.logout(CLOSE_TIMEOUT_S)
        self.close()


A = TypeVar("A")


def _expect(answer: Answer, kind: type[A]) -> A:
    if not isinstance(answer, kind):
        raise PricewireError(f"expected {kind.__name__}, got {answer.name}")
    return answer


class ProviderSession(Connection):
    """A provider ingest session: ProviderLogon, then ProviderQuote batches."""

    def logon(self, provider_id: int, token: str, timeout_s: float | None = None) -> LogonAccepted:
        """ProviderLogon; the LogonAccepted, or :class:`~pricewire_client.errors.LogonRefused`."""
        return self._logon_with(messages.provider_logon(provider_id, token), timeout_s)

    def quote(self, quotes: list[messages.Quote]) -> None:
        """Send one ProviderQuote batch."""
        self.send(messages.provider_quote(quotes))
