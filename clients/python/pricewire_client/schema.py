"""The pricewire SBE schema as data, transcribed from schema/pricewire-sbe.xml.

Every message of schema 0x5057 version 3 is described here once: its template id,
root block length, root fields (name, offset, primitive, the version that added it),
repeating groups and var data, in wire order. The codec (``codec.py``) is driven by these
tables only, so adding a message is adding a row. Nothing here allocates after import.

Version 3 appended ``streamId`` (uint64) to LogonAccepted (offset 21, block 21 -> 29) and
PriceSnapshot (offset 62, block 62 -> 70). A received root block that ends before a field
added by a later version (``since``) comes from a sender of an earlier version: the field
is absent (protocol.md §2); a block shorter than the first version's is malformed. So a
version 2 frame decodes without ``streamId``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, IntFlag

SCHEMA_ID = 0x5057
SCHEMA_VERSION = 3
SBE_ENCODING = 0xEB50
SOFH_LEN = 6
HEADER_LEN = 8
FRAME_LEN_MIN = SOFH_LEN + HEADER_LEN
FRAME_LEN_MAX = 65536
SERVER_FRAME_LEN_MAX = 1 << 20
SUBSCRIBER_FRAME_LEN_MAX_DEFAULT = 16384
NO_PRICE = -(1 << 63)
DEFAULT_TIER = 0xFF
BY_NAME = 0xFFFF
NAME_LEN = 16

# Primitive name -> (struct format character, size in bytes). Name16 is char[16].
PRIMITIVES: dict[str, tuple[str, int]] = {
    "u8": ("B", 1),
    "u16": ("H", 2),
    "u32": ("I", 4),
    "u64": ("Q", 8),
    "i64": ("q", 8),
    "name16": ("16s", 16),
}


@dataclass(frozen=True)
class Field:
    """One fixed-offset field of a root block or group entry."""

    name: str
    offset: int
    kind: str
    since: int = 1
    """The schema version that added the field."""

    @property
    def size(self) -> int:
        """Size of the field in bytes."""
        return PRIMITIVES[self.kind][1]

    @property
    def end(self) -> int:
        """Offset of the first byte after the field."""
        return self.offset + self.size

    def present(self, block_length: int) -> bool:
        """Whether a block of ``block_length`` bytes carries the field."""
        return self.end <= block_length


@dataclass(frozen=True)
class Group:
    """A repeating group: its entry length and entry fields."""

    name: str
    block_length: int
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class MessageSpec:
    """One message of the schema."""

    name: str
    template_id: int
    block_length: int
    fields: tuple[Field, ...] = ()
    groups: tuple[Group, ...] = ()
    data: tuple[str, ...] = ()

    @property
    def min_block_length(self) -> int:
        """The shortest root block: the first version's (a shorter one is malformed,
        protocol.md §2)."""
        return max((f.end for f in self.fields if f.since <= 1), default=0)


class RejectReason(IntEnum):
    """Reject.reason (uint16)."""

    MALFORMED = 1
    UNKNOWN_TEMPLATE = 2
    UNKNOWN_SCHEMA = 3
    UNSUPPORTED_VERSION = 4
    FRAME_TOO_LARGE = 5
    FRAME_TOO_SMALL = 6
    BAD_ENCODING_TYPE = 7
    NOT_LOGGED_ON = 8
    ALREADY_LOGGED_ON = 9
    RATE_LIMITED = 10
    OVERLOADED = 11
    DEADLINE_EXPIRED = 12
    UNKNOWN_SYMBOL = 13
    NOT_ENTITLED = 14
    LIMIT_REACHED = 15
    SHUTTING_DOWN = 16
    INTERNAL = 17
    UNEXPECTED_MESSAGE = 18
    INVALID_QUOTE = 19


class LogonRejectReason(IntEnum):
    """LogonRejected.reason (uint8)."""

    AUTH = 1
    BUSY = 2
    RATE_LIMITED = 3
    SHUTTING_DOWN = 4
    SESSION_LIMIT = 5
    NOT_ENTITLED = 6


class DisconnectReason(IntEnum):
    """Disconnect.reason (uint8)."""

    SLOW_CONSUMER = 1
    SHUTDOWN = 2
    PROTOCOL_ERROR = 3
    IDLE_TIMEOUT = 4
    AUTH = 5
    BUSY = 6
    LOGOUT = 7
    LOGON_TIMEOUT = 8
    MESSAGE_FLOOD = 9


class SubscribeStatus(IntEnum):
    """SubscribeResponse.results[].status (uint8)."""

    OK = 0
    UNKNOWN_SYMBOL = 1
    NOT_ENTITLED = 2
    LIMIT_REACHED = 3
    NOT_SUBSCRIBED = 4
    TIER_NOT_ENTITLED = 5


class PriceFlags(IntFlag):
    """PriceFlags bit set (uint8); unknown bits are kept and ignored."""

    CONFLATED = 0x01
    STALE = 0x02
    SINGLE_PROVIDER = 0x04
    INDICATIVE = 0x08


class QuoteFlags(IntFlag):
    """QuoteFlags bit set (uint8)."""

    INDICATIVE = 0x01


def _f(name: str, offset: int, kind: str, since: int = 1) -> Field:
    return Field(name, offset, kind, since)


_PRICE_FIELDS: tuple[Field, ...] = (
    _f("symbolId", 0, "u16"),
    _f("tier", 2, "u8"),
    _f("flags", 3, "u8"),
    _f("digits", 4, "u8"),
    _f("providers", 5, "u8"),
    _f("seq", 6, "u64"),
    _f("bid", 14, "i64"),
    _f("ask", 22, "i64"),
    _f("bidSize", 30, "u64"),
    _f("askSize", 38, "u64"),
    _f("providerTimeNs", 46, "u64"),
    _f("engineTimeNs", 54, "u64"),
)
_ENTRY = Group("entries", 18, (_f("symbolId", 0, "u16"), _f("name", 2, "name16")))
_REQ_TIER = (_f("requestId", 0, "u64"), _f("tier", 8, "u8"))

MESSAGES: tuple[MessageSpec, ...] = (
    MessageSpec("Logon", 1, 4, (_f("heartbeatIntervalMs", 0, "u32"),), (), ("account", "token")),
    MessageSpec(
        "LogonAccepted",
        2,
        29,
        (
            _f("sessionId", 0, "u64"),
            _f("heartbeatIntervalMs", 8, "u32"),
            _f("serverTimeNs", 12, "u64"),
            _f("defaultTier", 20, "u8"),
            _f("streamId", 21, "u64", since=3),
        ),
    ),
    MessageSpec("LogonRejected", 3, 5, (_f("reason", 0, "u8"), _f("retryAfterMs", 1, "u32"))),
    MessageSpec("Heartbeat", 4, 0),
    MessageSpec("Logout", 5, 0),
    MessageSpec(
        "Disconnect", 6, 5, (_f("reason", 0, "u8"), _f("retryAfterMs", 1, "u32")), (), ("text",)
    ),
    MessageSpec(
        "SymbolListRequest",
        10,
        13,
        (_f("requestId", 0, "u64"), _f("budgetUs", 8, "u32"), _f("critical", 12, "u8")),
    ),
    MessageSpec(
        "SymbolDirectory",
        11,
        8,
        (_f("requestId", 0, "u64"),),
        (
            Group(
                "symbols",
                19,
                (_f("symbolId", 0, "u16"), _f("digits", 2, "u8"), _f("name", 3, "name16")),
            ),
            Group("tiers", 17, (_f("tierId", 0, "u8"), _f("name", 1, "name16"))),
        ),
    ),
    MessageSpec("Subscribe", 12, 9, _REQ_TIER, (_ENTRY,)),
    MessageSpec("Unsubscribe", 13, 9, _REQ_TIER, (_ENTRY,)),
    MessageSpec(
        "SubscribeResponse",
        14,
        8,
        (_f("requestId", 0, "u64"),),
        (
            Group(
                "results",
                19,
                (_f("symbolId", 0, "u16"), _f("name", 2, "name16"), _f("status", 18, "u8")),
            ),
        ),
    ),
    MessageSpec("PriceSnapshot", 15, 70, (*_PRICE_FIELDS, _f("streamId", 62, "u64", since=3))),
    MessageSpec("PriceUpdate", 16, 62, _PRICE_FIELDS),
    MessageSpec(
        "SnapshotRequest",
        17,
        14,
        (
            _f("requestId", 0, "u64"),
            _f("budgetUs", 8, "u32"),
            _f("critical", 12, "u8"),
            _f("tier", 13, "u8"),
        ),
        (Group("symbols", 2, (_f("symbolId", 0, "u16"),)),),
    ),
    MessageSpec(
        "SnapshotResponse",
        18,
        8,
        (_f("requestId", 0, "u64"),),
        (Group("prices", 62, _PRICE_FIELDS),),
    ),
    MessageSpec(
        "HistoryRequest",
        19,
        17,
        (
            _f("requestId", 0, "u64"),
            _f("budgetUs", 8, "u32"),
            _f("critical", 12, "u8"),
            _f("symbolId", 13, "u16"),
            _f("count", 15, "u16"),
        ),
    ),
    MessageSpec(
        "HistoryResponse",
        20,
        11,
        (_f("requestId", 0, "u64"), _f("symbolId", 8, "u16"), _f("digits", 10, "u8")),
        (
            Group(
                "ticks",
                42,
                (
                    _f("provider", 0, "u16"),
                    _f("bid", 2, "i64"),
                    _f("ask", 10, "i64"),
                    _f("bidSize", 18, "u64"),
                    _f("askSize", 26, "u64"),
                    _f("providerTimeNs", 34, "u64"),
                ),
            ),
        ),
    ),
    MessageSpec(
        "Reject",
        21,
        16,
        (
            _f("requestId", 0, "u64"),
            _f("refTemplateId", 8, "u16"),
            _f("reason", 10, "u16"),
            _f("retryAfterMs", 12, "u32"),
        ),
        (),
        ("text",),
    ),
    MessageSpec("ProviderLogon", 30, 2, (_f("providerId", 0, "u16"),), (), ("token",)),
    MessageSpec(
        "ProviderQuote",
        31,
        0,
        (),
        (
            Group(
                "quotes",
                43,
                (
                    _f("symbolId", 0, "u16"),
                    _f("flags", 2, "u8"),
                    _f("bid", 3, "i64"),
                    _f("ask", 11, "i64"),
                    _f("bidSize", 19, "u64"),
                    _f("askSize", 27, "u64"),
                    _f("providerTimeNs", 35, "u64"),
                ),
            ),
        ),
    ),
)

BY_TEMPLATE: dict[int, MessageSpec] = {m.template_id: m for m in MESSAGES}
BY_NAME_: dict[str, MessageSpec] = {m.name: m for m in MESSAGES}


def spec(name: str) -> MessageSpec:
    """The spec of a message by its schema name (KeyError if unknown)."""
    return BY_NAME_[name]
