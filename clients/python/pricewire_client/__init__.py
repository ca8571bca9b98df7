"""pricewire_client: a standard-library Python client for the pricewire protocol.

Written from docs/protocol.md and schema/pricewire-sbe.xml alone.

- :class:`Session` (one connection) and :class:`Subscriber` (failover over several
  gateways, resume by sequence) are the blocking API; :mod:`pricewire_client.aio` is the
  same for asyncio. Neither loses a price while a request waits for its answer.
- :mod:`~pricewire_client.model` holds the typed messages (:class:`Price`, ...),
  :mod:`~pricewire_client.errors` the exceptions (all under :class:`PricewireError`).
- :mod:`~pricewire_client.codec` frames and encodes/decodes every message,
  :mod:`~pricewire_client.messages` builds the ones a client sends,
  :mod:`~pricewire_client.core` is the session state machine without I/O.
- ``python -m pricewire_client watch`` shows prices.

Logging goes to the ``pricewire_client`` logger (a :class:`logging.NullHandler` is
attached; configure logging to see it).
"""

import logging

from .codec import FrameReader, Message, decode, encode
from .core import SessionStats
from .errors import (
    CodecError,
    ConnectFailed,
    ConnectionClosed,
    ConnectionLost,
    FramingError,
    LogonRefused,
    MalformedError,
    PricewireError,
    ProtocolError,
    RefusedError,
    RequestRejected,
    RequestTimeout,
    UnknownTemplateError,
)
from .failover import Event, EventKind, parse_addresses
from .messages import Quote
from .model import (
    NO_PRICE,
    Disconnect,
    Heartbeat,
    HistoryResponse,
    HistoryTick,
    Incoming,
    LogonAccepted,
    LogonRejected,
    Price,
    PriceStatus,
    Reject,
    SnapshotResponse,
    SubscribeResponse,
    SubscribeResult,
    SymbolDirectory,
    SymbolInfo,
    TierInfo,
    from_decimal,
    to_decimal,
)
from .reconnect import Backoff, ReconnectPolicy
from .schema import (
    DisconnectReason,
    LogonRejectReason,
    PriceFlags,
    RejectReason,
    SubscribeStatus,
)
from .session import ProviderSession, Session
from .subscriber import Subscriber
from .tracker import SeqTracker

__version__ = "0.3.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "NO_PRICE",
    "Backoff",
    "CodecError",
    "ConnectFailed",
    "ConnectionClosed",
    "ConnectionLost",
    "Disconnect",
    "DisconnectReason",
    "Event",
    "EventKind",
    "FrameReader",
    "FramingError",
    "Heartbeat",
    "HistoryResponse",
    "HistoryTick",
    "Incoming",
    "LogonAccepted",
    "LogonRefused",
    "LogonRejectReason",
    "LogonRejected",
    "MalformedError",
    "Message",
    "Price",
    "PriceFlags",
    "PriceStatus",
    "PricewireError",
    "ProtocolError",
    "ProviderSession",
    "Quote",
    "ReconnectPolicy",
    "RefusedError",
    "Reject",
    "RejectReason",
    "RequestRejected",
    "RequestTimeout",
    "SeqTracker",
    "Session",
    "SessionStats",
    "SnapshotResponse",
    "SubscribeResponse",
    "SubscribeResult",
    "SubscribeStatus",
    "Subscriber",
    "SymbolDirectory",
    "SymbolInfo",
    "TierInfo",
    "UnknownTemplateError",
    "__version__",
    "decode",
    "encode",
    "from_decimal",
    "parse_addresses",
    "to_decimal",
]
