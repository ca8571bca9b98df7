"""The asyncio API seen through blocking calls, so one conformance test runs against both
APIs: :class:`AioSession` has the methods of :class:`pricewire_client.Session` and runs
each on a :class:`pricewire_client.aio.Session` in one event loop on a background thread
(:data:`LOOP`). Only the calling convention is adapted: every byte goes through the
asyncio reader and timer tasks, futures and queues under test."""

from __future__ import annotations

import asyncio
import copy
import ssl
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from pricewire_client import Message, aio, messages
from pricewire_client.core import INBOX_MAX, SessionStats
from pricewire_client.failover import Address, Event
from pricewire_client.model import (
    Disconnect,
    HistoryResponse,
    Incoming,
    LogonAccepted,
    Price,
    SnapshotResponse,
    SubscribeResponse,
    SymbolDirectory,
)
from pricewire_client.tracker import Key, SeqTracker

T = TypeVar("T")
MARGIN_S = 30.0  # beyond a call's own timeout: the loop thread is alive but busy


class Loop:
    """One event loop on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop; its result (bounded)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result((timeout_s or 0) + MARGIN_S)

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the loop thread (state read there is not changing meanwhile)."""

        async def wrapped() -> T:
            return fn()

        return self.run(wrapped())


LOOP = Loop()


class AioConnection:
    """The blocking face of an aio connection (shared by sessions and providers)."""

    kind: type[aio.Connection] = aio.Connection

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float = 5.0,
        *,
        rcvbuf: int | None = None,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        inbox_max: int = INBOX_MAX,
    ) -> None:
        opened = self.kind.open(
            host,
            port,
            timeout_s,
            tls=tls,
            server_hostname=server_hostname,
            rcvbuf=rcvbuf,
            inbox_max=inbox_max,
        )
        self.aio: Any = LOOP.run(opened, timeout_s)
        self.address = (host, port)

    @property
    def tracker(self) -> SeqTracker:
        """A copy of the tracker, taken on the loop thread."""
        return LOOP.call(lambda: copy.deepcopy(self.aio.tracker))

    @property
    def heartbeat_ms(self) -> int:
        return int(LOOP.call(lambda: self.aio.heartbeat_ms))

    @heartbeat_ms.setter
    def heartbeat_ms(self, value: int) -> None:
        def set_it() -> None:
            self.aio.heartbeat_ms = value

        LOOP.call(set_it)

    @property
    def accepted(self) -> LogonAccepted | None:
        return LOOP.call(lambda: self.aio.accepted)

    @property
    def stats(self) -> SessionStats:
        return LOOP.call(lambda: copy.copy(self.aio.stats))

    @property
    def latest(self) -> dict[Key, Price]:
        return LOOP.call(lambda: dict(self.aio.latest))

    @property
    def closed(self) -> bool:
        return bool(LOOP.call(lambda: self.aio.closed))

    def request_id(self) -> int:
        return int(LOOP.call(self.aio.request_id))

    def send(self, msg: Message | bytes) -> None:
        LOOP.run(self.aio.send(msg))

    def recv(self, timeout_s: float) -> Incoming | None:
        return LOOP.run(self.aio.recv(timeout_s), timeout_s)

    def wait_for(self, pred: Callable[[Incoming], bool], timeout_s: float) -> Incoming | None:
        return LOOP.run(self.aio.wait_for(pred, timeout_s), timeout_s)

    def wait_closed(self, timeout_s: float) -> list[Incoming]:
        return LOOP.run(self.aio.wait_closed(timeout_s), timeout_s)

    def close(self) -> None:
        LOOP.run(self.aio.close())


class AioSession(AioConnection):
    """The blocking face of :class:`pricewire_client.aio.Session`."""

    kind = aio.Session

    def logon(
        self,
        account: str = "demo",
        token: str = "demo",
        heartbeat_ms: int = 0,
        timeout_s: float | None = None,
    ) -> LogonAccepted:
        return LOOP.run(self.aio.logon(account, token, heartbeat_ms, timeout_s), timeout_s)

    def request(self, build: Callable[[int], Message], timeout_s: float | None = None) -> Any:
        return LOOP.run(self.aio.request(build, timeout_s), timeout_s)

    def symbols(self, budget_us: int = 0, timeout_s: float | None = None) -> SymbolDirectory:
        return LOOP.run(self.aio.symbols(budget_us, timeout_s), timeout_s)

    def subscribe(
        self, symbols: list[messages.SymbolRef], tier: int = 0xFF, timeout_s: float | None = None
    ) -> SubscribeResponse:
        return LOOP.run(self.aio.subscribe(symbols, tier, timeout_s), timeout_s)

    def unsubscribe(
        self, symbols: list[messages.SymbolRef], tier: int = 0xFF, timeout_s: float | None = None
    ) -> SubscribeResponse:
        return LOOP.run(self.aio.unsubscribe(symbols, tier, timeout_s), timeout_s)

    def snapshot(
        self,
        symbols: list[int],
        tier: int = 0xFF,
        budget_us: int = 0,
        critical: bool = False,
        timeout_s: float | None = None,
    ) -> SnapshotResponse:
        coro = self.aio.snapshot(symbols, tier, budget_us, critical, timeout_s)
        return LOOP.run(coro, timeout_s)

    def history(
        self, symbol_id: int, count: int, budget_us: int = 0, timeout_s: float | None = None
    ) -> HistoryResponse:
        return LOOP.run(self.aio.history(symbol_id, count, budget_us, timeout_s), timeout_s)

    def logout(self, timeout_s: float = 5.0) -> Disconnect | None:
        return LOOP.run(self.aio.logout(timeout_s), timeout_s)


class AioProviderSession(AioConnection):
    """The blocking face of :class:`pricewire_client.aio.ProviderSession`."""

    kind = aio.ProviderSession

    def logon(self, provider_id: int, token: str, timeout_s: float | None = None) -> LogonAccepted:
        return LOOP.run(self.aio.logon(provider_id, token, timeout_s), timeout_s)

    def quote(self, quotes: list[messages.Quote]) -> None:
        LOOP.run(self.aio.quote(quotes))


class AioSubscriber:
    """The blocking face of :class:`pricewire_client.aio.Subscriber` (started at once,
    without waiting for the first logon, as the blocking Subscriber does).

    Its supervisor reconnects by itself, where the blocking Subscriber reconnects only
    inside ``next_event``: :meth:`hold` keeps it away (new connections wait at a gate)
    until :meth:`release`, for a test that needs the terminal away while prices move.
    """

    def __init__(self, addresses: list[Address], **options: Any) -> None:
        self.gate = asyncio.Event()
        self.gate.set()

        async def gated(addr: Address) -> aio.Session:
            await self.gate.wait()
            return await aio.Session.open(addr[0], addr[1])

        async def make() -> aio.Subscriber:
            return await aio.connect(addresses, wait_s=None, open_session=gated, **options)

        self.aio: aio.Subscriber = LOOP.run(make())

    def hold(self) -> None:
        LOOP.call(self.gate.clear)

    def release(self) -> None:
        LOOP.call(self.gate.set)

    def subscribe(self, symbols: list[messages.SymbolRef], tier: int = 0xFF) -> None:
        LOOP.run(self.aio.subscribe(symbols, tier))

    def next_event(self, timeout_s: float) -> Event | None:
        return LOOP.run(self.aio.next_event(timeout_s), timeout_s)

    @property
    def tracker(self) -> SeqTracker:
        return LOOP.call(lambda: copy.deepcopy(self.aio.tracker))

    @property
    def latest(self) -> dict[Key, Price]:
        return LOOP.call(lambda: dict(self.aio.latest))

    @property
    def logons(self) -> int:
        return LOOP.call(lambda: self.aio.logons)

    @property
    def disconnects(self) -> int:
        return LOOP.call(lambda: self.aio.disconnects)

    def close(self) -> None:
        LOOP.run(self.aio.close())
