"""The asyncio failing-over subscriber: ``async with connect(addresses) as s``.

It behaves as the blocking :class:`pricewire_client.Subscriber` does (the same
:class:`~pricewire_client.failover.Failover` decides where and when to connect, the same
:class:`~pricewire_client.tracker.SeqTracker` judges resume or resync), with a supervisor
task doing the connecting: a lost session is replaced at once, whether or not the program
is reading. Events come out in order: a session's prices before its ``disconnected``
event, a ``logon`` before the new session's prices, ``closed`` last.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from .. import messages, schema
from ..core import INBOX_MAX
from ..errors import ConnectionLost, PricewireError, RequestTimeout
from ..failover import Address, Event, EventKind, Failover, address_list
from ..model import (
    Disconnect,
    HistoryResponse,
    Incoming,
    Price,
    SnapshotResponse,
    SubscribeResponse,
    SymbolDirectory,
)
from ..reconnect import ReconnectPolicy, system_rng
from ..tracker import Key, SeqTracker
from .session import Session

T = TypeVar("T")
WAIT_S = 10.0
"""How long ``connect()`` waits for the first logon by default."""


class Subscriber:
    """A reconnecting, failing-over asyncio subscriber (see the module). Make one with
    :func:`connect`; ``start()`` runs it, ``await close()`` stops it."""

    def __init__(
        self,
        addresses: Sequence[Address] | str,
        account: str = "demo",
        token: str = "demo",
        heartbeat_ms: int = 0,
        *,
        policy: ReconnectPolicy | None = None,
        rng: random.Random | None = None,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        timeout_s: float = 5.0,
        connect_timeout_s: float | None = None,
        logon_timeout_s: float | None = None,
        dead_after_heartbeats: int = 3,
        inbox_max: int = INBOX_MAX,
        open_session: Callable[[Address], Awaitable[Session]] | None = None,
    ) -> None:
        self.clock = time.monotonic
        self.failover = Failover(
            address_list(addresses), policy or ReconnectPolicy(), rng or system_rng(), self.clock()
        )
        self.account, self.token, self.heartbeat_ms = account, token, heartbeat_ms
        self.tls, self.server_hostname = tls, server_hostname
        self.timeout_s = timeout_s
        self.connect_timeout_s = timeout_s if connect_timeout_s is None else connect_timeout_s
        self.logon_timeout_s = timeout_s if logon_timeout_s is None else logon_timeout_s
        self.dead_after_heartbeats = dead_after_heartbeats
        self.inbox_max = inbox_max
        self._open_session = open_session or self._open
        self.tracker = SeqTracker()
        self.latest: dict[Key, Price] = {}
        """The last price received per (symbol, tier), over every session."""
        self.session: Session | None = None
        """The logged-on session (None while disconnected)."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed_seen = False
        self._skipped_before = 0

    # ---- state ------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while a session is logged on."""
        return self.session is not None

    @property
    def closed(self) -> bool:
        """True once the ``closed`` event was handed out (or :meth:`close` was called)."""
        return self._closed_seen

    @property
    def closed_reason(self) -> str | None:
        """Why the subscriber stopped (None while it runs)."""
        return self.failover.closed_reason

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
        """Frames skipped whole over every session (unknown template, malformed body)."""
        now = self.session.stats.skipped_frames if self.session is not None else 0
        return self._skipped_before + now

    def subs(self) -> list[tuple[int, list[messages.SymbolRef]]]:
        """The subscriptions sent again after a reconnect: (tier, symbols) in order."""
        return list(self.failover.subscriptions)

    # ---- running ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the supervisor task (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="pricewire subscriber")

    async def _open(self, addr: Address) -> Session:
        return await Session.open(
            addr[0],
            addr[1],
            self.connect_timeout_s,
            tls=self.tls,
            server_hostname=self.server_hostname,
            inbox_max=self.inbox_max,
        )

    async def _run(self) -> None:
        while self.failover.closed_reason is None:
            wait = self.failover.retry_at - self.clock()
            if wait > 0:
                await asyncio.sleep(wait)  # the backoff, not a synchronisation
            sess = await self._attempt()
            if sess is None:
                continue
            err = await sess.wait_ended()
            if self.session is sess:
                self._lost(sess, err)

    async def _attempt(self) -> Session | None:
        """One connect and logon; the logged-on session, or None (the failure recorded)."""
        addr = self.failover.address()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                sess = await self._open_session(addr)
        except TimeoutError:
            self._failed(ConnectionLost(f"connect to {addr} timed out"))
            return None
        except (PricewireError, OSError) as err:
            self._failed(err)
            return None
        sess.core.tracker = self.tracker
        sess.core.dead_after_heartbeats = self.dead_after_heartbeats
        sess.on_wake = self._wake.set
        try:
            accepted = await sess.logon(
                self.account, self.token, self.heartbeat_ms, self.logon_timeout_s
            )
        except (PricewireError, OSError) as err:
            self._skipped_before += sess.stats.skipped_frames
            await sess.close()
            self._failed(err)
            return None
        except asyncio.CancelledError:  # closed while logging on: leave no session behind
            await sess.close()
            raise
        self.session = sess
        self.failover.logged_on(accepted, self.clock())
        for tier, symbols in self.failover.subscriptions:
            with contextlib.suppress(PricewireError):
                await sess.send(messages.subscribe(sess.request_id(), symbols, tier))
        self._wake.set()
        return sess

    def _failed(self, err: PricewireError | OSError) -> None:
        self.failover.attempt_failed(err, self.clock())
        self._wake.set()

    def _lost(self, sess: Session, err: PricewireError) -> None:
        """The logged-on session ended: its unread messages, then ``disconnected``."""
        self.session = None
        self._skipped_before += sess.stats.skipped_frames
        while (item := sess.core.pop()) is not None:
            ev = self._event(item)
            if ev is not None:
                self.failover.events.append(ev)
        self.failover.lost(err, self.clock())
        self._wake.set()

    def _event(self, msg: Incoming) -> Event | None:
        addr = self.failover.address()
        if isinstance(msg, Price):
            self.latest[msg.key] = msg
            return Event(EventKind.PRICE, msg, status=msg.status, address=addr)
        if isinstance(msg, Disconnect):
            return None  # the disconnected event that follows carries it
        return Event(EventKind.MESSAGE, msg, address=addr)

    async def close(self, timeout_s: float = 2.0) -> None:
        """Log out (if connected) and stop reconnecting."""
        self.failover.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        sess, self.session = self.session, None
        if sess is not None:
            await sess.logout(timeout_s)
            await sess.close()
        self._closed_seen = True
        self._wake.set()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ---- what the program reads -------------------------------------------------------

    async def next_event(self, timeout_s: float | None) -> Event | None:
        """The next event within ``timeout_s`` (None: no limit), or None. After the
        ``closed`` event every call returns a ``closed`` event again."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            if self.failover.events:
                return self.failover.events.popleft()
            sess = self.session
            item = sess.core.pop() if sess is not None else None
            if item is not None:
                ev = self._event(item)
                if ev is not None:
                    return ev
                continue
            if self.failover.closed_reason is not None and (
                self._task is None or self._task.done() or self._closed_seen
            ):
                self._closed_seen = True
                return self.failover.closed_event()
            self._wake.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._wake.wait()
            except TimeoutError:
                return None

    async def events(self) -> AsyncIterator[Event]:
        """Every event up to and including ``closed``."""
        while not self._closed_seen:
            ev = await self.next_event(None)
            if ev is not None:
                yield ev

    def __aiter__(self) -> AsyncIterator[Event]:
        return self.events()

    async def prices(self) -> AsyncIterator[Price]:
        """Every price over every session until the subscriber closes: quietly after
        :meth:`close`; a subscriber that gave up raises why."""
        async for ev in self.events():
            if ev.price is not None:
                yield ev.price
        err = self.failover.end_error()
        if err is not None:
            raise err

    async def wait_connected(self, timeout_s: float) -> None:
        """Wait until a session is logged on; RequestTimeout, or the final error if the
        subscriber closed first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.session is None:
            if self.failover.closed_reason is not None:
                raise self.failover.end_error() or ConnectionLost("closed")
            self._wake.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._wake.wait()
            except TimeoutError:
                last = self.failover.events[-1].reason if self.failover.events else "no attempt"
                raise RequestTimeout(f"not connected within {timeout_s:g} s ({last})") from None

    # ---- requests ---------------------------------------------------------------------

    async def _on_session(self, timeout_s: float | None) -> tuple[Session, float]:
        wait = self.timeout_s if timeout_s is None else timeout_s
        start = self.clock()
        await self.wait_connected(wait)
        assert self.session is not None
        return self.session, max(wait - (self.clock() - start), 0.0)

    async def subscribe(
        self,
        symbols: Sequence[messages.SymbolRef],
        tier: int = schema.DEFAULT_TIER,
        timeout_s: float | None = None,
    ) -> SubscribeResponse | None:
        """Subscribe now if connected (the SubscribeResponse), and again after every
        reconnect; None when not connected (it goes out with the next logon)."""
        self.failover.keep(symbols, tier)
        if self.session is None:
            return None
        return await self.session.subscribe(symbols, tier, timeout_s)

    async def unsubscribe(
        self,
        symbols: Sequence[messages.SymbolRef],
        tier: int = schema.DEFAULT_TIER,
        timeout_s: float | None = None,
    ) -> SubscribeResponse | None:
        """Unsubscribe now if connected, and stop subscribing these after a reconnect."""
        self.failover.drop(symbols, tier)
        if self.session is None:
            return None
        return await self.session.unsubscribe(symbols, tier, timeout_s)

    async def symbols(self, budget_us: int = 0, timeout_s: float | None = None) -> SymbolDirectory:
        """SymbolListRequest on the current session (waiting for one within the timeout)."""
        sess, left = await self._on_session(timeout_s)
        return await sess.symbols(budget_us, left)

    async def snapshot(
        self,
        symbols: Sequence[int],
        tier: int = schema.DEFAULT_TIER,
        budget_us: int = 0,
        critical: bool = False,
        timeout_s: float | None = None,
    ) -> SnapshotResponse:
        """SnapshotRequest on the current session; the SnapshotResponse."""
        sess, left = await self._on_session(timeout_s)
        return await sess.snapshot(symbols, tier, budget_us, critical, left)

    async def history(
        self, symbol_id: int, count: int, budget_us: int = 0, timeout_s: float | None = None
    ) -> HistoryResponse:
        """HistoryRequest on the current session; the HistoryResponse."""
        sess, left = await self._on_session(timeout_s)
        return await sess.history(symbol_id, count, budget_us, left)


class _Connecting:
    """What :func:`connect` returns: await it, or use it as ``async with``."""

    def __init__(self, sub: Subscriber, wait_s: float | None) -> None:
        self.sub, self.wait_s = sub, wait_s

    async def _start(self) -> Subscriber:
        self.sub.start()
        if self.wait_s is not None:
            try:
                await self.sub.wait_connected(self.wait_s)
            except BaseException:
                await self.sub.close()
                raise
        return self.sub

    def __await__(self) -> Generator[Any, None, Subscriber]:
        return self._start().__await__()

    async def __aenter__(self) -> Subscriber:
        return await self._start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.sub.close()


def connect(
    addresses: Sequence[Address] | str,
    account: str = "demo",
    token: str = "demo",
    *,
    wait_s: float | None = WAIT_S,
    **options: Any,
) -> _Connecting:
    """A started :class:`Subscriber` over ``addresses`` (``"host:port,..."`` or a list).

    ``async with connect("10.0.0.1:9400,10.0.0.2:9400") as s:`` (or ``s = await
    connect(...)``) waits up to ``wait_s`` for the first logon (None: do not wait),
    raising :class:`~pricewire_client.errors.LogonRefused` for a final refusal or
    :class:`~pricewire_client.errors.RequestTimeout`; afterwards it reconnects by itself.
    ``options`` are :class:`Subscriber`'s (``heartbeat_ms``, ``policy``, ``tls``, ...).
    """
    return _Connecting(Subscriber(addresses, account, token, **options), wait_s)


__all__ = ["Subscriber", "connect"]
