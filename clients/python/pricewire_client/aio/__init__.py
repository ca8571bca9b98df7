"""The asyncio API of pricewire_client.

::

    from pricewire_client import aio

    async with aio.connect("10.0.0.1:9400,10.0.0.2:9400", "demo", "demo") as s:
        await s.subscribe(["EURUSD", "USDJPY"], tier=0)
        async for price in s.prices():
            print(price.symbol_id, price.seq, price.bid_decimal, price.status)
            if price.seq % 50 == 0:
                snap = await s.snapshot([price.symbol_id], tier=0)  # no price is lost

- :func:`connect` / :class:`Subscriber`: failover over several gateways, resume by
  sequence and stream, requests on the current session.
- :class:`Session` / :class:`ProviderSession`: one connection (``await
  Session.open(host, port)``), the asyncio twins of the blocking classes.

Errors and messages are those of :mod:`pricewire_client` (:mod:`~pricewire_client.errors`,
:mod:`~pricewire_client.model`).
"""

from .session import Connection, ProviderSession, Session, open_stream
from .subscriber import Subscriber, connect

__all__ = ["Connection", "ProviderSession", "Session", "Subscriber", "connect", "open_stream"]
