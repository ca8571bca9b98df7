"""pricewire_client: a standard-library Python client for the pricewire protocol.

Written from docs/protocol.md and schema/pricewire-sbe.xml alone. ``codec`` frames and
encodes/decodes every message, ``messages`` builds the ones a client sends, ``session``
runs subscriber and provider sessions, ``python -m pricewire_client watch`` shows prices.
"""

from .codec import FrameReader, Message, decode, encode
from .messages import Quote
from .schema import (
    DisconnectReason,
    LogonRejectReason,
    PriceFlags,
    RejectReason,
    SubscribeStatus,
)
from .session import ConnectionClosed, LogonRefused, ProviderSession, SeqTracker, Session

__all__ = [
    "ConnectionClosed",
    "DisconnectReason",
    "FrameReader",
    "LogonRefused",
    "LogonRejectReason",
    "Message",
    "PriceFlags",
    "ProviderSession",
    "Quote",
    "RejectReason",
    "SeqTracker",
    "Session",
    "SubscribeStatus",
    "decode",
    "encode",
]
