"""pricewire_client: a standard-library Python client for the pricewire protocol.

Written from docs/protocol.md and schema/pricewire-sbe.xml alone. ``codec`` frames and
encodes/decodes every message, ``messages`` builds the ones a client sends, ``session``
runs subscriber and provider sessions, ``subscriber`` fails over between gateways and
resumes by sequence (with ``reconnect``'s backoff), ``python -m pricewire_client watch``
shows prices.
"""

from .codec import FrameReader, Message, decode, encode
from .messages import Quote
from .reconnect import Backoff, ReconnectPolicy
from .schema import (
    DisconnectReason,
    LogonRejectReason,
    PriceFlags,
    RejectReason,
    SubscribeStatus,
)
from .session import ConnectionClosed, LogonRefused, ProviderSession, Session
from .tracker import SeqTracker
from .subscriber import Event, Subscriber

__all__ = [
    "Backoff",
    "ConnectionClosed",
    "DisconnectReason",
    "Event",
    "FrameReader",
    "LogonRefused",
    "LogonRejectReason",
    "Message",
    "PriceFlags",
    "ProviderSession",
    "Quote",
    "ReconnectPolicy",
    "RejectReason",
    "SeqTracker",
    "Session",
    "Subscriber",
    "SubscribeStatus",
    "decode",
    "encode",
]
