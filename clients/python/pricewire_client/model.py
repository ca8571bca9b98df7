"""Typed views of the messages a server sends: frozen dataclasses with real field types.

Prices stay integers on the wire and here: ``bid``/``ask`` are *points*, mantissas at the
symbol's ``digits`` (EURUSD 1.08123 is ``108123`` with ``digits`` 5), and ``NO_PRICE``
(``INT64_MIN``) means no price on that side. :func:`to_decimal` and the ``*_decimal``
properties give the exact :class:`~decimal.Decimal` (``None`` for no price); nothing here
uses floating point. Enum fields are open (protocol.md §1): a value this client does not
know stays a plain ``int``, and ``reason_name`` says ``"unknown(N)"``.

:func:`from_message` turns a decoded :class:`~pricewire_client.codec.Message` into its
class; a template without a class here (one a server never sends to a subscriber) becomes
:class:`Other`. Every class has ``name``, the schema's message name.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum, StrEnum
from typing import ClassVar, TypeVar

from . import schema
from .codec import Message
from .errors import reason_name
from .schema import (
    DisconnectReason,
    LogonRejectReason,
    PriceFlags,
    RejectReason,
    SubscribeStatus,
)

NO_PRICE = schema.NO_PRICE

PRICE_STRUCT = struct.Struct("<HBBBBQqqQQQQ")
"""The 62-byte price block (PriceSnapshot, PriceUpdate, SnapshotResponse entries)."""

E = TypeVar("E", bound=IntEnum)


def open_enum(enum: type[E], value: int) -> E | int:
    """``enum(value)``, or the plain ``int`` when this client does not know the value."""
    try:
        return enum(value)
    except ValueError:
        return value


def to_decimal(points: int, digits: int) -> Decimal | None:
    """The exact value of a mantissa at ``digits`` (``None`` for ``NO_PRICE``)."""
    if points == NO_PRICE:
        return None
    return Decimal(points).scaleb(-digits)


def from_decimal(value: Decimal | str, digits: int) -> int:
    """The mantissa of ``value`` at ``digits``; ValueError if it has more decimals."""
    scaled = Decimal(value).scaleb(digits)
    if scaled != scaled.to_integral_value():
        raise ValueError(f"{value} has more than {digits} decimals")
    return int(scaled)


class PriceStatus(StrEnum):
    """What the session's :class:`~pricewire_client.tracker.SeqTracker` made of a price
    (protocol.md §5). A StrEnum: it compares equal to its lower-case value."""

    SNAPSHOT = "snapshot"
    """A PriceSnapshot: the expectation restarts from it."""
    RESUMED = "resumed"
    """The first snapshot of a key after a reconnect, and no price was missed."""
    RESYNC = "resync"
    """The first snapshot after a reconnect or a stream change, and prices were missed (or
    the stream is another one): the snapshot is the full price."""
    OK = "ok"
    """A PriceUpdate with the expected ``seq``."""
    GAP = "gap"
    """A PriceUpdate past the expected ``seq``: prices were missed (a fault, §5)."""
    OLD = "old"
    """A PriceUpdate older than one already accepted: to be ignored."""
    UNTRACKED = "untracked"
    """Not judged: a SnapshotResponse entry, or a price made by hand."""


@dataclass(frozen=True, slots=True)
class Price:
    """One price of a (symbol, tier): a PriceSnapshot (``snapshot``) or a PriceUpdate.

    ``bid``/``ask`` are points at ``digits`` (``NO_PRICE`` = none). ``stream_id`` is the
    stream that numbered ``seq``: a snapshot's own, an update's the one of its key's last
    snapshot on the session; 0 when unknown (a version 2 server, or a SnapshotResponse
    entry, which carries none). ``status`` is the tracker's verdict.
    """

    symbol_id: int
    tier: int
    seq: int
    bid: int
    ask: int
    digits: int
    flags: PriceFlags = PriceFlags(0)
    providers: int = 0
    bid_size: int = 0
    ask_size: int = 0
    provider_time_ns: int = 0
    engine_time_ns: int = 0
    snapshot: bool = False
    stream_id: int = 0
    status: PriceStatus = PriceStatus.UNTRACKED

    @property
    def name(self) -> str:
        """``"PriceSnapshot"`` or ``"PriceUpdate"``."""
        return "PriceSnapshot" if self.snapshot else "PriceUpdate"

    @property
    def key(self) -> tuple[int, int]:
        """(symbol_id, tier): what a sequence is tracked by."""
        return (self.symbol_id, self.tier)

    @property
    def bid_decimal(self) -> Decimal | None:
        """The bid as an exact Decimal (``None`` when there is no bid)."""
        return to_decimal(self.bid, self.digits)

    @property
    def ask_decimal(self) -> Decimal | None:
        """The ask as an exact Decimal (``None`` when there is no ask)."""
        return to_decimal(self.ask, self.digits)

    @property
    def has_bid(self) -> bool:
        """Whether there is a bid."""
        return self.bid != NO_PRICE

    @property
    def has_ask(self) -> bool:
        """Whether there is an ask."""
        return self.ask != NO_PRICE

    @property
    def stale(self) -> bool:
        """The ``stale`` flag: no healthy provider backs the price; do not trade on it."""
        return bool(self.flags & PriceFlags.STALE)

    @property
    def conflated(self) -> bool:
        """The ``conflated`` flag: older prices of this key were replaced by this one."""
        return bool(self.flags & PriceFlags.CONFLATED)

    @property
    def indicative(self) -> bool:
        """The ``indicative`` flag: the price is not firm."""
        return bool(self.flags & PriceFlags.INDICATIVE)

    def decimal(self, points: int) -> Decimal | None:
        """Any mantissa of this symbol (a size excepted) as a Decimal at its digits."""
        return to_decimal(points, self.digits)


def _int(f: dict[str, int | str], key: str) -> int:
    return int(f.get(key, 0))


def price_from_fields(f: dict[str, int | str], snapshot: bool, stream_id: int) -> Price:
    """A :class:`Price` from a decoded price block (a message's fields or a group entry;
    a field not there is 0)."""
    return Price(
        _int(f, "symbolId"),
        _int(f, "tier"),
        _int(f, "seq"),
        _int(f, "bid"),
        _int(f, "ask"),
        _int(f, "digits"),
        PriceFlags(_int(f, "flags")),
        _int(f, "providers"),
        _int(f, "bidSize"),
        _int(f, "askSize"),
        _int(f, "providerTimeNs"),
        _int(f, "engineTimeNs"),
        snapshot,
        _int(f, "streamId") or stream_id,
    )


@dataclass(frozen=True, slots=True)
class LogonAccepted:
    """The server took the logon."""

    name: ClassVar[str] = "LogonAccepted"
    session_id: int
    heartbeat_interval_ms: int
    server_time_ns: int
    default_tier: int
    stream_id: int = 0
    """The stream's identity (0: a version 2 server, which has none)."""


@dataclass(frozen=True, slots=True)
class LogonRejected:
    """The server refused the logon (also raised as :class:`~.errors.LogonRefused`)."""

    name: ClassVar[str] = "LogonRejected"
    reason: LogonRejectReason | int
    retry_after_ms: int

    @property
    def reason_name(self) -> str:
        """The reason's protocol name (``"session_limit"``)."""
        return reason_name(LogonRejectReason, int(self.reason))


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Sent by the server when it sent nothing else for the heartbeat interval."""

    name: ClassVar[str] = "Heartbeat"


@dataclass(frozen=True, slots=True)
class Disconnect:
    """The server ends the session (the connection closes after it)."""

    name: ClassVar[str] = "Disconnect"
    reason: DisconnectReason | int
    retry_after_ms: int
    text: str = ""

    @property
    def reason_name(self) -> str:
        """The reason's protocol name (``"slow_consumer"``)."""
        return reason_name(DisconnectReason, int(self.reason))


@dataclass(frozen=True, slots=True)
class SymbolInfo:
    """One symbol of a SymbolDirectory."""

    symbol_id: int
    digits: int
    name: str


@dataclass(frozen=True, slots=True)
class TierInfo:
    """One tier of a SymbolDirectory."""

    tier_id: int
    name: str


@dataclass(frozen=True, slots=True)
class SymbolDirectory:
    """The symbols and tiers the account may see."""

    name: ClassVar[str] = "SymbolDirectory"
    request_id: int
    symbols: tuple[SymbolInfo, ...] = ()
    tiers: tuple[TierInfo, ...] = ()

    def symbol(self, ref: int | str) -> SymbolInfo | None:
        """A symbol by id or by name (None if not listed)."""
        for sym in self.symbols:
            if sym.symbol_id == ref or sym.name == ref:
                return sym
        return None


@dataclass(frozen=True, slots=True)
class SubscribeResult:
    """One entry of a SubscribeResponse, in the order of the request's entries."""

    symbol_id: int
    name: str
    status: SubscribeStatus | int

    @property
    def ok(self) -> bool:
        """Whether the entry was served (status ``ok``)."""
        return self.status == SubscribeStatus.OK

    @property
    def status_name(self) -> str:
        """The status's protocol name (``"unknown_symbol"``)."""
        return reason_name(SubscribeStatus, int(self.status))


@dataclass(frozen=True, slots=True)
class SubscribeResponse:
    """The answer to a Subscribe or an Unsubscribe."""

    name: ClassVar[str] = "SubscribeResponse"
    request_id: int
    results: tuple[SubscribeResult, ...] = ()


@dataclass(frozen=True, slots=True)
class SnapshotResponse:
    """The answer to a SnapshotRequest: current prices (same ``seq`` as the stream)."""

    name: ClassVar[str] = "SnapshotResponse"
    request_id: int
    prices: tuple[Price, ...] = ()


@dataclass(frozen=True, slots=True)
class HistoryTick:
    """One provider tick of a HistoryResponse (points at ``digits``)."""

    provider: int
    bid: int
    ask: int
    bid_size: int
    ask_size: int
    provider_time_ns: int
    digits: int

    @property
    def bid_decimal(self) -> Decimal | None:
        """The bid as an exact Decimal (``None`` when there is no bid)."""
        return to_decimal(self.bid, self.digits)

    @property
    def ask_decimal(self) -> Decimal | None:
        """The ask as an exact Decimal (``None`` when there is no ask)."""
        return to_decimal(self.ask, self.digits)


@dataclass(frozen=True, slots=True)
class HistoryResponse:
    """The answer to a HistoryRequest: the most recent ticks, oldest first."""

    name: ClassVar[str] = "HistoryResponse"
    request_id: int
    symbol_id: int
    digits: int
    ticks: tuple[HistoryTick, ...] = ()


@dataclass(frozen=True, slots=True)
class Reject:
    """A refused request or frame (raised as :class:`~.errors.RequestRejected` when it
    answers a request of the session)."""

    name: ClassVar[str] = "Reject"
    request_id: int
    ref_template_id: int
    reason: RejectReason | int
    retry_after_ms: int
    text: str = ""

    @property
    def reason_name(self) -> str:
        """The reason's protocol name (``"rate_limited"``)."""
        return reason_name(RejectReason, int(self.reason))


@dataclass(frozen=True, slots=True)
class Other:
    """A message without a class here (one a server does not send to subscribers)."""

    message: Message

    @property
    def name(self) -> str:
        """The schema's message name."""
        return self.message.name


Answer = SymbolDirectory | SubscribeResponse | SnapshotResponse | HistoryResponse
"""What a request returns."""

Incoming = (
    Price
    | LogonAccepted
    | LogonRejected
    | Heartbeat
    | Disconnect
    | SymbolDirectory
    | SubscribeResponse
    | SnapshotResponse
    | HistoryResponse
    | Reject
    | Other
)
"""Any message a server sends, typed."""


def _directory(msg: Message) -> SymbolDirectory:
    syms = tuple(
        SymbolInfo(int(s["symbolId"]), int(s["digits"]), str(s["name"]))
        for s in msg.groups.get("symbols", [])
    )
    tiers = tuple(TierInfo(int(t["tierId"]), str(t["name"])) for t in msg.groups.get("tiers", []))
    return SymbolDirectory(_int(msg.fields, "requestId"), syms, tiers)


def _subscribe_response(msg: Message) -> SubscribeResponse:
    results = tuple(
        SubscribeResult(
            int(r["symbolId"]), str(r["name"]), open_enum(SubscribeStatus, int(r["status"]))
        )
        for r in msg.groups.get("results", [])
    )
    return SubscribeResponse(_int(msg.fields, "requestId"), results)


def _history(msg: Message) -> HistoryResponse:
    digits = _int(msg.fields, "digits")
    ticks = tuple(
        HistoryTick(
            int(t["provider"]),
            int(t["bid"]),
            int(t["ask"]),
            int(t["bidSize"]),
            int(t["askSize"]),
            int(t["providerTimeNs"]),
            digits,
        )
        for t in msg.groups.get("ticks", [])
    )
    return HistoryResponse(
        _int(msg.fields, "requestId"), _int(msg.fields, "symbolId"), digits, ticks
    )


def from_message(msg: Message, stream_id: int = 0) -> Incoming:
    """The typed message of ``msg``; ``stream_id`` is given to prices that do not carry
    their own (updates, SnapshotResponse entries)."""
    f, name = msg.fields, msg.name
    if name in ("PriceSnapshot", "PriceUpdate"):
        return price_from_fields(f, name == "PriceSnapshot", stream_id)
    if name == "LogonAccepted":
        return LogonAccepted(
            _int(f, "sessionId"),
            _int(f, "heartbeatIntervalMs"),
            _int(f, "serverTimeNs"),
            _int(f, "defaultTier"),
            _int(f, "streamId"),
        )
    if name == "LogonRejected":
        reason = open_enum(LogonRejectReason, _int(f, "reason"))
        return LogonRejected(reason, _int(f, "retryAfterMs"))
    if name == "Heartbeat":
        return Heartbeat()
    if name == "Disconnect":
        reason_d = open_enum(DisconnectReason, _int(f, "reason"))
        return Disconnect(reason_d, _int(f, "retryAfterMs"), msg.text("text"))
    if name == "SymbolDirectory":
        return _directory(msg)
    if name == "SubscribeResponse":
        return _subscribe_response(msg)
    if name == "SnapshotResponse":
        prices = tuple(price_from_fields(p, True, stream_id) for p in msg.groups["prices"])
        return SnapshotResponse(_int(f, "requestId"), prices)
    if name == "HistoryResponse":
        return _history(msg)
    if name == "Reject":
        reason_r = open_enum(RejectReason, _int(f, "reason"))
        return Reject(
            _int(f, "requestId"),
            _int(f, "refTemplateId"),
            reason_r,
            _int(f, "retryAfterMs"),
            msg.text("text"),
        )
    return Other(msg)
