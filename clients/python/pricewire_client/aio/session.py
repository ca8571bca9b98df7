"""asyncio sessions over one connection each: the same protocol core as the blocking
:class:`pricewire_client.Session`, with a reader task and a timer task.

The reader task reads the socket continuously and feeds the
:class:`~pricewire_client.core.SessionCore`: prices go to the session's inbox in arrival
order and are handed out by :meth:`Session.recv` / ``async for price in s.prices()``;
answers resolve the future of the request that sent them (matched by ``requestId``), so
``await s.snapshot(...)`` never takes a price away from the stream. The timer task sends
heartbeats and notices a dead peer (silent for 3 intervals). When the caller falls far
behind (``INBOX_HIGH_WATER`` messages) and no answer is awaited, the reader stops reading:
the server's slow-consumer handling (conflated snapshots, §5) takes over instead of the
client's memory growing; a request restarts reading so its answer is never stuck behind
unread prices. Every wait takes a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Self, TypeVar

from .. import messages, schema
from ..codec import Message
from ..core import INBOX_MAX, SessionCore, SessionStats
from ..errors import ConnectFailed, ConnectionLost, PricewireError, RequestTimeout
from ..model import (
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
from ..tracker import Key, SeqTracker

log = logging.getLogger("pricewire_client.aio")
TIMEOUT_S = 5.0
CLOSE_TIMEOUT_S = 1.0
READ_MAX = 1 << 16
TIMER_RECHECK_S = 1.0
"""The timer task looks again at least this often (the interval changes at logon)."""
A = TypeVar("A")


async def open_stream(
    host: str,
    port: int,
    timeout_s: float,
    *,
    tls: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    rcvbuf: int | None = None,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connected stream to (host, port) within ``timeout_s`` (TLS handshake included);
    :class:`~pricewire_client.errors.ConnectFailed` otherwise."""
    where = f"{host}:{port}"
    hostname = (server_hostname or host) if tls is not None else None
    try:
        async with asyncio.timeout(timeout_s):
            if rcvbuf is None:
                return await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=hostname, limit=READ_MAX
                )
            loop = asyncio.get_running_loop()
            family, kind, proto, _, addr = (
                await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            )[0]
            sock = socket.socket(family, kind, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.setblocking(False)
            await loop.sock_connect(sock, addr)
            return await asyncio.open_connection(
                sock=sock, ssl=tls, server_hostname=hostname, limit=READ_MAX
            )
    except TimeoutError as err:
        raise ConnectFailed(where, f"timed out after {timeout_s:g} s") from err
    except OSError as err:  # refused, unreachable, a certificate refused
        raise ConnectFailed(where, str(err)) from err


class Connection:
    """One framed asyncio connection (the part shared by :class:`Session` and
    :class:`ProviderSession`). Make one with ``await Session.open(host, port)``."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        address: tuple[str, int] = ("", 0),
        timeout_s: float = TIMEOUT_S,
        tracker: SeqTracker | None = None,
        inbox_max: int = INBOX_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.address = address
        self.timeout_s = timeout_s
        self.core = SessionCore(tracker, now=clock(), inbox_max=inbox_max)
        self._reader, self._writer = reader, writer
        self._futures: dict[int, asyncio.Future[Answer]] = {}
        self._logon: asyncio.Future[LogonAccepted] | None = None
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._ended = asyncio.Event()
        self.on_wake: Callable[[], None] | None = None
        """Called whenever messages arrive or the connection ends (a Subscriber's hook)."""
        self._tasks = [
            asyncio.create_task(self._read_loop(), name=f"pricewire read {address}"),
            asyncio.create_task(self._timer_loop(), name=f"pricewire timer {address}"),
        ]

    @classmethod
    async def open(
        cls,
        host: str = "127.0.0.1",
        port: int = 9400,
        timeout_s: float = TIMEOUT_S,
        *,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        rcvbuf: int | None = None,
        tracker: SeqTracker | None = None,
        inbox_max: int = INBOX_MAX,
    ) -> Self:
        """Connect within ``timeout_s`` (TLS with ``tls``); the connection (not logged on)."""
        reader, writer = await open_stream(
            host, port, timeout_s, tls=tls, server_hostname=server_hostname, rcvbuf=rcvbuf
        )
        return cls(
            reader,
            writer,
            address=(host, port),
            timeout_s=timeout_s,
            tracker=tracker,
            inbox_max=inbox_max,
        )

    # ---- state ------------------------------------------------------------------------

    @property
    def tracker(self) -> SeqTracker:
        """The sequence tracker."""
        return self.core.tracker

    @property
    def heartbeat_ms(self) -> int:
        """The heartbeat interval in use (set 0 to stop heartbeats and the dead-peer check)."""
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

    async def wait_ended(self) -> PricewireError:
        """Wait until the connection ends; why."""
        await self._ended.wait()
        assert self.core.error is not None
        return self.core.error

    # ---- the tasks --------------------------------------------------------------------

    async def _read_loop(self) -> None:
        try:
            while self.core.error is None:
                if self.core.reading_paused:
                    await self._paused()
                data = await self._reader.read(READ_MAX)
                if not data:
                    self.core.connection_lost("EOF")
                    break
                self.core.receive(data, self.clock())
                self._after_io()
        except (OSError, ssl.SSLError) as err:  # reset, TLS alert
            self.core.connection_lost(f"connection lost: {err}")
        finally:
            self._after_io()

    async def _paused(self) -> None:
        """Wait while the caller is far behind; the pause is not the peer's silence."""
        while self.core.reading_paused and self.core.error is None:
            self._space.clear()
            await self._space.wait()
        self.core.last_received = self.clock()

    async def _timer_loop(self) -> None:
        while self.core.error is None:
            due = self.core.next_timer()
            wait = TIMER_RECHECK_S if due is None else due - self.clock()
            await asyncio.sleep(min(max(wait, 0.0), TIMER_RECHECK_S))
            self.core.timer(self.clock(), check_dead=not self.core.reading_paused)
            self._after_io()

    def _after_io(self) -> None:
        """Send what the core queued, settle answered requests, wake readers."""
        data = self.core.outgoing()
        if data and self.core.error is None and not self._writer.is_closing():
            self._writer.write(data)
        for rid, fut in self._futures.items():
            if fut.done():
                continue
            try:
                answer = self.core.take_answer(rid)
            except PricewireError as err:
                fut.set_exception(err)
                continue
            if answer is not None:
                fut.set_result(answer)
        self._settle_logon()
        if self.core.inbox or self.core.error is not None:
            self._wake.set()
            if self.on_wake is not None:
                self.on_wake()
        if self.core.error is not None and not self._ended.is_set():
            self._end()

    def _settle_logon(self) -> None:
        fut = self._logon
        if fut is None or fut.done():
            return
        try:
            accepted = self.core.logon_result()
        except PricewireError as err:
            fut.set_exception(err)
            return
        if accepted is not None:
            fut.set_result(accepted)

    def _end(self) -> None:
        self._ended.set()
        self._space.set()
        self._writer.close()
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()

    # ---- calls ------------------------------------------------------------------------

    async def send(self, msg: Message | bytes) -> None:
        """Send one message (or raw bytes, for tests) and wait until it is written."""
        self.core.raise_if_failed()
        self.core.send(msg, self.clock())
        self._after_io()
        try:
            await self._writer.drain()
        except (OSError, ssl.SSLError) as err:
            self.core.connection_lost(f"send failed: {err}")
            self._after_io()
            self.core.raise_if_failed()

    async def recv(self, timeout_s: float | None) -> Incoming | None:
        """The next message not claimed by a request, or None when ``timeout_s`` (None:
        no limit) passes first. Raises the error that ended the connection once every
        message received before it was returned."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            item = self.core.pop()
            if item is not None:
                if not self.core.reading_paused:
                    self._space.set()
                return item
            self.core.raise_if_failed()
            self._wake.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._wake.wait()
            except TimeoutError:
                if not self.core.inbox and self.core.error is None:
                    return None

    async def wait_for(self, pred: Callable[[Incoming], bool], timeout_s: float) -> Incoming | None:
        """The first message matching ``pred`` within ``timeout_s``, else None; messages
        that do not match are **discarded** (use :meth:`recv` to see every one)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (left := deadline - loop.time()) > 0:
            msg = await self.recv(left)
            if msg is not None and pred(msg):
                return msg
        return None

    async def wait_closed(self, timeout_s: float) -> list[Incoming]:
        """Read until the connection ends; the messages received meanwhile
        (:class:`~pricewire_client.errors.RequestTimeout` if still open after
        ``timeout_s``)."""
        seen: list[Incoming] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while (left := deadline - loop.time()) > 0:
                msg = await self.recv(left)
                if msg is not None:
                    seen.append(msg)
        except PricewireError:
            return seen
        raise RequestTimeout(f"still open after {timeout_s} s; received {[m.name for m in seen]}")

    async def _logon_with(self, msg: Message, timeout_s: float | None) -> LogonAccepted:
        self.core.start_logon(msg, self.clock())
        fut: asyncio.Future[LogonAccepted] = asyncio.get_running_loop().create_future()
        self._logon = fut
        self._space.set()
        self._after_io()
        wait = self.timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(wait):
                return await fut
        except TimeoutError:
            if fut.done():
                raise
            raise RequestTimeout(f"{msg.name}: no answer within {wait:g} s") from None
        finally:
            self._logon = None

    async def close(self) -> None:
        """Close the connection (idempotent); no Logout is sent (see ``logout``)."""
        self.core.fail(ConnectionLost("closed by the client"))
        self._after_io()
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError, asyncio.CancelledError):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self._writer.wait_closed()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class Session(Connection):
    """An asyncio subscriber session (see the module): ``s = await Session.open(host,
    port)``, ``await s.logon()``, then requests and ``async for price in s.prices()``.
    ``async with`` logs out (bounded by 1 s) and closes on exit."""

    async def logon(
        self,
        account: str = "demo",
        token: str = "demo",
        heartbeat_ms: int = 0,
        timeout_s: float | None = None,
    ) -> LogonAccepted:
        """Log on; the LogonAccepted, or :class:`~pricewire_client.errors.LogonRefused`
        (``.reason``, ``.retry_after``) or :class:`~pricewire_client.errors.RequestTimeout`."""
        accepted = await self._logon_with(messages.logon(account, token, heartbeat_ms), timeout_s)
        log.info(
            "logged on at %s:%d: session %d, stream %d",
            *self.address,
            accepted.session_id,
            accepted.stream_id,
        )
        return accepted

    async def request(
        self, build: Callable[[int], Message], timeout_s: float | None = None
    ) -> Answer:
        """Send the request ``build`` makes for a fresh id; its answer. Prices received
        meanwhile stay in the stream. After a Reject(rate_limited) a request first waits for
        its floor, or raises that Reject at once if the floor outlasts ``timeout_s``. Raises
        :class:`~pricewire_client.errors.RequestRejected`,
        :class:`~pricewire_client.errors.RequestTimeout` or
        :class:`~pricewire_client.errors.ConnectionLost`; a cancelled or timed-out request's
        late answer is dropped."""
        wait = self.timeout_s if timeout_s is None else timeout_s
        if (quiet_s := self.core.quiet_left(self.clock(), wait)) > 0:
            await asyncio.sleep(quiet_s)  # §4.2: the server's floor after rate_limited
            wait -= quiet_s
        rid = self.core.start_request(build, self.clock())
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._futures[rid] = fut
        self._space.set()  # an awaited answer: keep reading
        self._after_io()
        try:
            async with asyncio.timeout(wait):
                return await fut
        except TimeoutError:
            if fut.done():
                raise
            self.core.abandon(rid)
            raise RequestTimeout(f"request {rid}: no answer within {wait:g} s") from None
        except asyncio.CancelledError:
            self.core.abandon(rid)
            raise
        finally:
            del self._futures[rid]

    async def symbols(self, budget_us: int = 0, timeout_s: float | None = None) -> SymbolDirectory:
        """SymbolListRequest; the SymbolDirectory."""
        answer = await self.request(lambda r: messages.symbol_list_request(r, budget_us), timeout_s)
        return _expect(answer, SymbolDirectory)

    async def subscribe(
        self,
        symbols: Sequence[messages.SymbolRef],
        tier: int = schema.DEFAULT_TIER,
        timeout_s: float | None = None,
    ) -> SubscribeResponse:
        """Subscribe (by id or name); the SubscribeResponse (snapshots follow on the stream)."""
        answer = await self.request(lambda r: messages.subscribe(r, symbols, tier), timeout_s)
        return _expect(answer, SubscribeResponse)

    async def unsubscribe(
        self,
        symbols: Sequence[messages.SymbolRef],
        tier: int = schema.DEFAULT_TIER,
        timeout_s: float | None = None,
    ) -> SubscribeResponse:
        """Unsubscribe; the SubscribeResponse."""
        answer = await self.request(lambda r: messages.unsubscribe(r, symbols, tier), timeout_s)
        return _expect(answer, SubscribeResponse)

    async def snapshot(
        self,
        symbols: Sequence[int],
        tier: int = schema.DEFAULT_TIER,
        budget_us: int = 0,
        critical: bool = False,
        timeout_s: float | None = None,
    ) -> SnapshotResponse:
        """SnapshotRequest (at most 32 symbol ids); the SnapshotResponse."""
        answer = await self.request(
            lambda r: messages.snapshot_request(r, symbols, tier, budget_us, critical), timeout_s
        )
        return _expect(answer, SnapshotResponse)

    async def history(
        self, symbol_id: int, count: int, budget_us: int = 0, timeout_s: float | None = None
    ) -> HistoryResponse:
        """HistoryRequest; the HistoryResponse (the newest ``count`` ticks, oldest first)."""
        answer = await self.request(
            lambda r: messages.history_request(r, symbol_id, count, budget_us), timeout_s
        )
        return _expect(answer, HistoryResponse)

    async def prices(self) -> AsyncIterator[Price]:
        """Every price, in arrival order, until the session ends: quietly after
        :meth:`logout`, else raising why (:class:`~pricewire_client.errors.ConnectionLost`)."""
        while True:
            try:
                msg = await self.recv(None)
            except ConnectionLost:
                if self.core.logged_out:
                    return
                raise
            if isinstance(msg, Price):
                yield msg

    def __aiter__(self) -> AsyncIterator[Price]:
        return self.prices()

    async def logout(self, timeout_s: float = TIMEOUT_S) -> Disconnect | None:
        """Logout; the Disconnect(logout) (None if the server just closed). Messages
        received before it are discarded."""
        try:
            await self.send(messages.logout())
            disc = await self.wait_for(lambda m: m.name == "Disconnect", timeout_s)
        except PricewireError:
            return None
        return disc if isinstance(disc, Disconnect) else None

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.closed and self.accepted is not None:
            await self.logout(CLOSE_TIMEOUT_S)
        await self.close()


def _expect(answer: Answer, kind: type[A]) -> A:
    if not isinstance(answer, kind):
        raise PricewireError(f"expected {kind.__name__}, got {answer.name}")
    return answer


class ProviderSession(Connection):
    """An asyncio provider ingest session: ProviderLogon, then ProviderQuote batches."""

    async def logon(
        self, provider_id: int, token: str, timeout_s: float | None = None
    ) -> LogonAccepted:
        """ProviderLogon; the LogonAccepted or :class:`~pricewire_client.errors.LogonRefused`."""
        return await self._logon_with(messages.provider_logon(provider_id, token), timeout_s)

    async def quote(self, quotes: list[messages.Quote]) -> None:
        """Send one ProviderQuote batch."""
        await self.send(messages.provider_quote(quotes))
