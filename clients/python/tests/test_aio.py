"""What only the asyncio API has: ``connect()``'s first-logon wait and its errors, a close
that leaves no task behind (also while a logon hangs), a price iterator that ends quietly
on close and raises why when the subscriber gave up, cancelled requests, and concurrent
requests each answered by its own id. Against the suite's server and a mute listener."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from pricewire_client import (
    LogonRefused,
    Price,
    ReconnectPolicy,
    RequestTimeout,
    SnapshotResponse,
    SymbolDirectory,
    aio,
)

from conftest import Feeder
from server import Server

EURUSD = 0


def others() -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


@pytest.fixture
def mute_port() -> Iterator[int]:
    """A listener that accepts (the kernel does) and never sends a byte."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


def test_connect_raises_a_final_refusal_and_leaves_nothing_running(server: Server) -> None:
    async def run() -> None:
        with pytest.raises(LogonRefused) as err:
            await aio.connect(f"127.0.0.1:{server.port}", "demo", "wrong")
        assert err.value.reason == "auth"
        assert others() == set()

    asyncio.run(run())


def test_connect_times_out_on_a_mute_server_and_close_cancels_the_logon(mute_port: int) -> None:
    async def run() -> None:
        with pytest.raises(RequestTimeout):
            await aio.connect(f"127.0.0.1:{mute_port}", wait_s=0.5, logon_timeout_s=30.0)
        assert others() == set(), "the hanging logon was cancelled and its session closed"

    asyncio.run(run())


def test_prices_end_quietly_on_close_and_raise_when_the_subscriber_gives_up(
    server: Server, feeder: Feeder
) -> None:
    async def run() -> None:
        s = await aio.connect(f"127.0.0.1:{server.port}")
        await s.subscribe([EURUSD], tier=0)
        got: list[Price] = []

        async def consume() -> None:
            async for price in s.prices():
                got.append(price)

        async def three() -> None:
            while len(got) < 3:
                await asyncio.sleep(0.01)  # polling interval of a bounded wait

        task = asyncio.create_task(consume())
        await asyncio.wait_for(three(), 10)
        await s.close()
        await asyncio.wait_for(task, 5)  # ended without raising
        assert got[0].snapshot and got[0].status == "snapshot"
        refused = await aio.connect(
            f"127.0.0.1:{server.port}", "demo", "wrong", wait_s=None,
            policy=ReconnectPolicy(attempts_max=0),
        )  # fmt: skip
        with pytest.raises(LogonRefused):
            async for _ in refused.prices():
                pass
        assert refused.closed
        await refused.close()

    asyncio.run(run())


def test_a_cancelled_request_leaves_the_session_usable(server: Server) -> None:
    async def run() -> None:
        async with await aio.Session.open("127.0.0.1", server.port) as s:
            await s.logon()
            pending = asyncio.create_task(s.snapshot([EURUSD]))
            await asyncio.sleep(0)
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
            answers = await asyncio.gather(s.symbols(), s.snapshot([EURUSD]), s.symbols())
            assert [type(a) for a in answers] == [SymbolDirectory, SnapshotResponse,
                                                  SymbolDirectory]  # fmt: skip
            assert len({a.request_id for a in answers}) == 3
            assert s.stats.orphans == 0, "the cancelled request's answer was dropped"

    asyncio.run(run())
