"""A subscriber that survives its server: reconnects over a list of addresses and resumes
by sequence.

:class:`Subscriber` keeps what a terminal asked for (the subscriptions) and one
:class:`~pricewire_client.tracker.SeqTracker` across connections. When a session ends (the
connection closes, the server sends Disconnect, or nothing arrives for
``dead_after_heartbeats`` heartbeat intervals, protocol.md §4.1) it waits
``max(retryAfterMs, full-jitter backoff)`` (:mod:`pricewire_client.reconnect`), connects to
the **next** address of its list, logs on again and subscribes again. The first snapshot of
each (symbol, tier) on the new session is judged by sequence and stream (protocol.md §5):
``resumed`` when no price was missed on the same stream, a ``resync`` on a real gap or a
new stream (a restarted server). The first round of connects tries each address once, in
order, without waiting. Reconnects are bounded by the policy's attempts or deadline; a
final answer (bad credentials, logout) ends the subscriber.

:meth:`Subscriber.next_event` never blocks past its timeout: connecting (TCP and TLS) and
logging on advance in steps bounded by it, and each attempt as a whole is bounded by
``connect_timeout_s`` and ``logon_timeout_s``. Requests (:meth:`Subscriber.snapshot`,
``history``, ``symbols``) go to the current session; prices that arrive meanwhile are
kept for :meth:`Subscriber.next_event`, in order.

Time (``clock``, ``sleep``), randomness (``rng``) and the connection itself (``connect``)
are injectable, so tests can drive every decision without a server.
"""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from types import TracebackType
from typing import Self, TypeVar

from . import messages, schema
from .codec import Message
from .core import INBOX_MAX
from .errors import ConnectionLost, PricewireError, RequestTimeout
from .failover import (
    ADDRESSES_MAX,
    Address,
    Event,
    EventKind,
    Failover,
    address_list,
    parse_addresses,
)
from .model import (
    Disconnect,
    HistoryResponse,
    Incoming,
    Price,
    SnapshotResponse,
    SymbolDirectory,
)
from .reconnect import ReconnectPolicy, system_rng
from .session import Session
from .tracker import Key, SeqTracker
from .transport import Connector, SocketTransport

__all__ = [
    "ADDRESSES_MAX",
    "Address",
    "DEAD_AFTER_HEARTBEATS",
    "Event",
    "EventKind",
    "Subscriber",
    "parse_addresses",
]

DEAD_AFTER_HEARTBEATS = 3
T = TypeVar("T")


class Subscriber:
    """A reconnecting, failing-over subscriber over ``addresses`` (tried in order; a list
    of (host, port) or ``"host:port,host:port"``). Iterating yields its events up to and
    including ``closed``; ``with Subscriber(...) as sub:`` closes it on exit."""

    def __init__(
        self,
        addresses: Sequence[Address] | str,
        account: str = "demo",
        token: str = "demo",
        heartbeat_ms: int = 0,
        *,
        policy: ReconnectPolicy | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        connect: Callable[[Address], Session] | None = None,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        timeout_s: float = 5.0,
        connect_timeout_s: float | None = None,
        logon_timeout_s: float | None = None,
        dead_after_heartbeats: int = DEAD_AFTER_HEARTBEATS,
        inbox_max: int = INBOX_MAX,
    ) -> None:
        self.clock, self.sleep = clock, sleep
        self.failover = Failover(
            address_list(addresses), policy or ReconnectPolicy(), rng or system_rng(), clock()
        )
        self.account, self.token, self.heartbeat_ms = account, token, heartbeat_ms
        self.tls, self.server_hostname = tls, server_hostname
        self.timeout_s = timeout_s
        """Default timeout of requests."""
        self.connect_timeout_s = timeout_s if connect_timeout_s is None else connect_timeout_s
        self.logon_timeout_s = timeout_s if logon_timeout_s is None else logon_timeout_s
        self._connect = connect
        self.dead_after_heartbeats = dead_after_heartbeats
        self.inbox_max = inbox_max
        self.tracker = SeqTracker()
        self.latest: dict[Key, Price] = {}
        """The last price received per (symbol, tier), over every session."""
        self.session: Session | None = None
        """The logged-on session (None while disconnected)."""
        self._connector: Connector | None = None
        self._logging_on: Session | None = None
        self._attempt_deadline = 0.0
        self._skipped_before = 0
        self._closed_seen = False

    # ---- what the terminal asks for ---------------------------------------------------

    @property
    def addresses(self) -> list[Address]:
        """The addresses, in the order tried."""
        return self.failover.addresses

    @property
    def policy(self) -> ReconnectPolicy:
        """The reconnect policy."""
        return self.failover.policy

    @property
    def logons(self) -> int:
        """Sessions logged on so far."""
        return self.failover.logons

    @property
    def disconnects(self) -> int:
        """Logged-on sessions lost so far."""
        return self.failover.disconnects

    @property
    def skipped_frames(self) -> int:
        """Frames skipped whole over every session: an unknown template or malformed body."""
        now = self.session.stats.skipped_frames if self.session is not None else 0
        return self._skipped_before + now

    @property
    def closed_reason(self) -> str | None:
        """Why the subscriber stopped (None while it runs)."""
        return self.failover.closed_reason

    def subscribe(
        self, symbols: Sequence[messages.SymbolRef], tier: int = schema.DEFAULT_TIER
    ) -> int | None:
        """Subscribe now if connected, and again after every reconnect.

        The request id the SubscribeResponse (a ``message`` event) will carry, or None when
        not connected (the subscription goes out with the next logon).
        """
        self.failover.keep(symbols, tier)
        return self._send_request(lambda rid: messages.subscribe(rid, symbols, tier))

    def unsubscribe(
        self, symbols: Sequence[messages.SymbolRef], tier: int = schema.DEFAULT_TIER
    ) -> int | None:
        """Unsubscribe now if connected, and stop subscribing these after a reconnect."""
        self.failover.drop(symbols, tier)
        return self._send_request(lambda rid: messages.unsubscribe(rid, symbols, tier))

    def subs(self) -> list[tuple[int, list[messages.SymbolRef]]]:
        """The subscriptions sent again after a reconnect: (tier, symbols) in order."""
        return list(self.failover.subscriptions)

    @property
    def connected(self) -> bool:
        """True while a session is logged on."""
        return self.session is not None

    @property
    def closed(self) -> bool:
        """True once the ``closed`` event was handed out (or :meth:`close` was called):
        ``while not sub.closed: sub.next_event(...)`` sees every event, ``closed`` last."""
        return self._closed_seen

    def close(self, timeout_s: float = 2.0) -> None:
        """Log out (if connected) and stop reconnecting."""
        self._abandon_attempt()
        if self.session is not None:
            self.session.logout(timeout_s)
            self.session.close()
            self.session = None
        self.failover.close()
        self._closed_seen = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[Event]:
        """Every event up to and including ``closed``."""
        while not self.closed:
            ev = self.next_event(3600.0)
            if ev is not None:
                yield ev

    def prices(self) -> Iterator[Price]:
        """Every price over every session until the subscriber closes. Ends quietly after
        :meth:`close`; a subscriber that gave up raises why (:class:`LogonRefused`,
        :class:`ConnectionLost`)."""
        for ev in self:
            if ev.price is not None:
                yield ev.price
        err = self.failover.end_error()
        if err is not None:
            raise err

    # ---- requests on the current session ----------------------------------------------

    def symbols(self, budget_us: int = 0, timeout_s: float | None = None) -> SymbolDirectory:
        """SymbolListRequest on the current session (waiting for one within the timeout)."""
        return self._on_session(lambda s, t: s.symbols(budget_us, t), timeout_s)

    def snapshot(
        self,
        symbols: Sequence[int],
        tier: int = schema.DEFAULT_TIER,
        budget_us: int = 0,
        critical: bool = False,
        timeout_s: float | None = None,
    ) -> SnapshotResponse:
        """SnapshotRequest on the current session; the SnapshotResponse."""
        return self._on_session(
            lambda s, t: s.snapshot(symbols, tier, budget_us, critical, t), timeout_s
        )

    def history(
        self, symbol_id: int, count: int, budget_us: int = 0, timeout_s: float | None = None
    ) -> HistoryResponse:
        """HistoryRequest on the current session; the HistoryResponse."""
        return self._on_session(lambda s, t: s.history(symbol_id, count, budget_us, t), timeout_s)

    def _on_session(self, call: Callable[[Session, float], T], timeout_s: float | None) -> T:
        """Run ``call`` on a logged-on session, connecting first if needed (bounded by the
        timeout). A lost session is handled as in :meth:`next_event` and raised."""
        wait = self.timeout_s if timeout_s is None else timeout_s
        deadline = self.clock() + wait
        while self.session is None:
            if self.failover.closed_reason is not None:
                raise ConnectionLost(f"subscriber closed: {self.failover.closed_reason}")
            if self.clock() >= deadline:
                raise RequestTimeout(f"not connected within {wait:g} s")
            self._step(deadline)
        sess = self.session
        try:
            return call(sess, max(deadline - self.clock(), 0.0))
        except PricewireError as err:
            if sess.closed and self.session is sess:
                self._lost(sess.error or err)
            raise

    # ---- the loop ---------------------------------------------------------------------

    def next_event(self, timeout_s: float) -> Event | None:
        """The next event within ``timeout_s`` (None if none), reconnecting as needed.

        Never blocks past ``timeout_s``: connects and logons advance in bounded steps, and
        while disconnected it waits (``sleep``) for the next attempt. After the ``closed``
        event every call returns a ``closed`` event again.
        """
        deadline = self.clock() + timeout_s
        stepped = False
        while True:
            if self.failover.events:
                return self.failover.events.popleft()
            sess = self.session
            if sess is not None:
                event = self._from_session(sess, deadline, stepped)
                if event is not None or (stepped and self.clock() >= deadline):
                    return event
            elif self.failover.closed_reason is not None:
                self._closed_seen = True
                return self.failover.closed_event()
            elif stepped and self.clock() >= deadline:
                return None
            else:
                self._step(deadline)
            stepped = True

    def _from_session(self, sess: Session, deadline: float, stepped: bool) -> Event | None:
        """The next event of the logged-on session, reading once if it holds none."""
        item = sess.core.pop()
        if item is not None:
            return self._event(item)
        if sess.core.error is not None:
            self._lost(sess.core.error)
            return None
        if not stepped or self.clock() < deadline:
            sess.pump(deadline)
        return None

    def _event(self, msg: Incoming) -> Event | None:
        addr = self.failover.address()
        if isinstance(msg, Price):
            self.latest[msg.key] = msg
            return Event(EventKind.PRICE, msg, status=msg.status, address=addr)
        if isinstance(msg, Disconnect):
            self._lost(ConnectionLost(f"Disconnect({msg.reason_name}) {msg.text!r}", msg))
            return None
        return Event(EventKind.MESSAGE, msg, address=addr)

    def _step(self, deadline: float) -> None:
        """Advance the connection by one step bounded by ``deadline``."""
        now = self.clock()
        if self._logging_on is not None:
            self._poll_logon(self._logging_on, deadline)
        elif self._connector is not None:
            self._poll_connect(self._connector, deadline)
        elif self.failover.closed_reason is not None:
            return
        elif self.failover.due(now):
            self._start_attempt(now)
        elif deadline > now:
            self.sleep(min(self.failover.retry_at, deadline) - now)  # the backoff, not a sync

    def _start_attempt(self, now: float) -> None:
        addr = self.failover.address()
        self._attempt_deadline = now + self.connect_timeout_s
        if self._connect is None:
            try:
                self._connector = Connector(
                    addr[0],
                    addr[1],
                    self.connect_timeout_s,
                    now,
                    tls=self.tls,
                    server_hostname=self.server_hostname,
                )
            except (PricewireError, OSError) as err:
                self.failover.attempt_failed(err, self.clock())
            return
        try:
            sess = self._connect(addr)
        except (PricewireError, OSError) as err:
            self.failover.attempt_failed(err, self.clock())
            return
        self._begin_logon(sess)

    def _poll_connect(self, conn: Connector, deadline: float) -> None:
        try:
            sock = conn.poll(max(deadline - self.clock(), 0.0), self.clock())
        except (PricewireError, OSError) as err:
            self._connector = None
            self.failover.attempt_failed(err, self.clock())
            return
        if sock is None:
            return
        self._connector = None
        addr = self.failover.address()
        sess = Session(
            addr[0],
            addr[1],
            self.timeout_s,
            clock=self.clock,
            transport=SocketTransport(sock),
            inbox_max=self.inbox_max,
        )
        self._begin_logon(sess)

    def _begin_logon(self, sess: Session) -> None:
        sess.tracker = self.tracker
        sess.core.dead_after_heartbeats = self.dead_after_heartbeats
        self._attempt_deadline = self.clock() + self.logon_timeout_s
        try:
            sess.start_logon(self.account, self.token, self.heartbeat_ms)
        except PricewireError as err:
            sess.close()
            self.failover.attempt_failed(err, self.clock())
            return
        self._logging_on = sess

    def _poll_logon(self, sess: Session, deadline: float) -> None:
        wait = min(deadline, self._attempt_deadline) - self.clock()
        try:
            accepted = sess.poll_logon(max(wait, 0.0))
            if accepted is None and self.clock() >= self._attempt_deadline:
                raise RequestTimeout(f"no answer to Logon within {self.logon_timeout_s:g} s")
        except (PricewireError, OSError) as err:
            self._logging_on = None
            self._skipped_before += sess.stats.skipped_frames
            sess.close()
            self.failover.attempt_failed(err, self.clock())
            return
        if accepted is None:
            return
        self._logging_on = None
        self.session = sess
        self.failover.logged_on(accepted, self.clock())
        for tier, symbols in self.failover.subscriptions:
            if self._send_request(partial(messages.subscribe, symbols=symbols, tier=tier)) is None:
                return  # the send failed: the session is already lost

    def _abandon_attempt(self) -> None:
        if self._connector is not None:
            self._connector.close()
            self._connector = None
        if self._logging_on is not None:
            self._logging_on.close()
            self._logging_on = None

    def _send_request(self, build: Callable[[int], Message]) -> int | None:
        sess = self.session
        if sess is None:
            return None
        rid = sess.request_id()
        try:
            sess.send(build(rid))
        except PricewireError as err:
            self._lost(err)
            return None
        return rid

    def _lost(self, err: PricewireError) -> None:
        """The logged-on session ended."""
        sess, self.session = self.session, None
        if sess is not None:
            self._skipped_before += sess.stats.skipped_frames
            sess.close()
            self.failover.lost(err, self.clock())
