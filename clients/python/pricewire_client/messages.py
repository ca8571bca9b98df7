"""Builders for the messages a client or provider sends, and small views of server answers.

Each builder returns a :class:`~pricewire_client.codec.Message` ready for ``encode``. Symbols
in Subscribe/Unsubscribe are given as ``int`` (by id) or ``str`` (by name, id 0xFFFF).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import schema
from .codec import Message, Value

SymbolRef = int | str


def logon(account: str, token: str, heartbeat_ms: int = 0) -> Message:
    """Logon: open a subscriber session."""
    return Message(
        "Logon",
        {"heartbeatIntervalMs": heartbeat_ms},
        data={"account": account.encode(), "token": token.encode()},
    )


def heartbeat() -> Message:
    """Heartbeat: sent by either side when idle."""
    return Message("Heartbeat")


def logout() -> Message:
    """Logout: end the session."""
    return Message("Logout")


def symbol_list_request(request_id: int, budget_us: int = 0, critical: bool = False) -> Message:
    """SymbolListRequest: ask for the symbol and tier directory."""
    return Message(
        "SymbolListRequest",
        {"requestId": request_id, "budgetUs": budget_us, "critical": int(critical)},
    )


def _entries(symbols: Sequence[SymbolRef]) -> list[dict[str, Value]]:
    out: list[dict[str, Value]] = []
    for sym in symbols:
        if isinstance(sym, str):
            out.append({"symbolId": schema.BY_NAME, "name": sym})
        else:
            out.append({"symbolId": sym, "name": ""})
    return out


def subscribe(
    request_id: int, symbols: Sequence[SymbolRef], tier: int = schema.DEFAULT_TIER
) -> Message:
    """Subscribe to symbols (by id or by name) at one tier (0xFF = account default)."""
    return Message(
        "Subscribe", {"requestId": request_id, "tier": tier}, {"entries": _entries(symbols)}
    )


def unsubscribe(
    request_id: int, symbols: Sequence[SymbolRef], tier: int = schema.DEFAULT_TIER
) -> Message:
    """Unsubscribe from symbols at one tier."""
    return Message(
        "Unsubscribe", {"requestId": request_id, "tier": tier}, {"entries": _entries(symbols)}
    )


def snapshot_request(
    request_id: int,
    symbols: Sequence[int],
    tier: int = schema.DEFAULT_TIER,
    budget_us: int = 0,
    critical: bool = False,
) -> Message:
    """SnapshotRequest: current prices of symbols at one tier, without subscribing."""
    return Message(
        "SnapshotRequest",
        {"requestId": request_id, "budgetUs": budget_us, "critical": int(critical), "tier": tier},
        {"symbols": [{"symbolId": s} for s in symbols]},
    )


def history_request(
    request_id: int, symbol_id: int, count: int, budget_us: int = 0, critical: bool = False
) -> Message:
    """HistoryRequest: the most recent provider ticks of one symbol."""
    return Message(
        "HistoryRequest",
        {
            "requestId": request_id,
            "budgetUs": budget_us,
            "critical": int(critical),
            "symbolId": symbol_id,
            "count": count,
        },
    )


def provider_logon(provider_id: int, token: str) -> Message:
    """ProviderLogon: open an ingest session."""
    return Message("ProviderLogon", {"providerId": provider_id}, data={"token": token.encode()})


@dataclass(frozen=True)
class Quote:
    """One provider quote: mantissas at the symbol's digits (NO_PRICE = no side)."""

    symbol_id: int
    bid: int
    ask: int
    bid_size: int = 1_000_000
    ask_size: int = 1_000_000
    provider_time_ns: int = 0
    indicative: bool = False

    def entry(self) -> dict[str, Value]:
        """The ProviderQuote group entry."""
        return {
            "symbolId": self.symbol_id,
            "flags": int(schema.QuoteFlags.INDICATIVE) if self.indicative else 0,
            "bid": self.bid,
            "ask": self.ask,
            "bidSize": self.bid_size,
            "askSize": self.ask_size,
            "providerTimeNs": self.provider_time_ns,
        }


def provider_quote(quotes: list[Quote]) -> Message:
    """ProviderQuote: a batch of quotes."""
    return Message("ProviderQuote", groups={"quotes": [q.entry() for q in quotes]})


def format_price(mantissa: int, digits: int) -> str:
    """A mantissa as a decimal string ("-" for NO_PRICE)."""
    if mantissa == schema.NO_PRICE:
        return "-"
    sign = "-" if mantissa < 0 else ""
    text = str(abs(mantissa)).rjust(digits + 1, "0")
    return sign + (text[:-digits] + "." + text[-digits:] if digits else text)


def flag_names(flags: int) -> str:
    """PriceFlags as a comma list of names ("" when none)."""
    return ",".join(
        f.name.lower() for f in schema.PriceFlags if f.name is not None and flags & f.value
    )
