"""Typed messages and the exception hierarchy, without a socket: prices as integer points
with exact Decimal helpers, open enums, error names and attributes, old names kept."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

import pricewire_client
from pricewire_client import (
    NO_PRICE,
    CodecError,
    ConnectFailed,
    ConnectionClosed,
    ConnectionLost,
    Disconnect,
    FramingError,
    LogonRefused,
    LogonRejected,
    MalformedError,
    Message,
    Price,
    PriceFlags,
    PricewireError,
    ProtocolError,
    RefusedError,
    Reject,
    RejectReason,
    RequestRejected,
    RequestTimeout,
    UnknownTemplateError,
    from_decimal,
    to_decimal,
)
from pricewire_client.model import from_message


def test_one_hierarchy_with_the_old_names() -> None:
    for cls in (ProtocolError, RefusedError, ConnectionLost, RequestTimeout):
        assert issubclass(cls, PricewireError)
    for cls in (CodecError, FramingError, MalformedError, UnknownTemplateError):
        assert issubclass(cls, ProtocolError) and getattr(pricewire_client, cls.__name__)
    assert issubclass(LogonRefused, RefusedError) and issubclass(RequestRejected, RefusedError)
    assert issubclass(ConnectFailed, ConnectionLost) and ConnectionClosed is ConnectionLost
    assert issubclass(ConnectionLost, ConnectionError) and issubclass(RequestTimeout, TimeoutError)
    from pricewire_client.codec import CodecError as OldPlace  # importable where it was

    assert OldPlace is CodecError


def test_refusals_print_the_reasons_name_and_carry_retry_after() -> None:
    err = LogonRefused(LogonRejected(5, 1_500))
    assert str(err) == "logon refused: session_limit, retry after 1.500 s"
    assert (err.reason, err.code, err.retry_after) == ("session_limit", 5, 1.5)
    rej = RequestRejected(Reject(42, 17, RejectReason.RATE_LIMITED, 250, "slow down"))
    assert str(rej) == "request 42 rejected: rate_limited, retry after 0.250 s ('slow down')"
    assert (rej.request_id, rej.ref_template_id, rej.retry_after) == (42, 17, 0.25)
    busy = LogonRefused(Disconnect(6, 3_000, "busy"))
    assert busy.reason == "busy" and "logon ended by Disconnect: busy" in str(busy)
    unknown = LogonRefused(LogonRejected(77, 0))
    assert unknown.reason == "unknown(77)" and unknown.code == 77
    lost = ConnectionLost("Disconnect(slow_consumer)", Disconnect(1, 2_000))
    assert (lost.reason, lost.retry_after) == ("slow_consumer", 2.0)


def test_enums_are_open() -> None:
    msg = Message("Reject", {"requestId": 1, "refTemplateId": 17, "reason": 999})
    rej = from_message(msg)
    assert isinstance(rej, Reject) and rej.reason == 999 and rej.reason_name == "unknown(999)"
    known = from_message(Message("Reject", {"reason": 10}))
    assert known.reason is RejectReason.RATE_LIMITED  # type: ignore[union-attr]
    flags = from_message(Message("PriceUpdate", {"flags": 0x81}))
    assert isinstance(flags, Price) and flags.conflated and int(flags.flags) == 0x81


def test_prices_are_points_and_decimals_are_exact() -> None:
    price = Price(0, 0, 1, 108_123, NO_PRICE, 5)
    assert price.bid_decimal == Decimal("1.08123") and str(price.bid_decimal) == "1.08123"
    assert price.ask_decimal is None and not price.has_ask and price.has_bid
    assert to_decimal(-5, 2) == Decimal("-0.05") and to_decimal(150_100, 3) == Decimal("150.1")
    assert to_decimal(12, 0) == Decimal(12)
    assert from_decimal("1.08123", 5) == 108_123 and from_decimal(Decimal("150.1"), 3) == 150_100
    with pytest.raises(ValueError):
        from_decimal("1.081234", 5)
    rng = random.Random(3)
    for _ in range(500):
        points, digits = rng.randrange(-(1 << 63) + 1, 1 << 63), rng.randrange(0, 19)
        value = to_decimal(points, digits)
        assert value is not None and from_decimal(value, digits) == points


def test_price_flags_and_names() -> None:
    price = Price(3, 2, 9, 1, 2, 5, PriceFlags.STALE | PriceFlags.INDICATIVE, snapshot=True)
    assert price.stale and price.indicative and not price.conflated
    assert price.name == "PriceSnapshot" and price.key == (3, 2)
    assert Price(3, 2, 9, 1, 2, 5).name == "PriceUpdate"
    with pytest.raises(AttributeError):
        price.bid = 5  # type: ignore[misc]
