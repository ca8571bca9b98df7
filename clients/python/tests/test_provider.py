"""Conformance of the provider ingest side (protocol.md §7), seen by a provider session and
by a subscriber that receives the resulting prices."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest

from pricewire_client import (
    DisconnectReason,
    LogonRefused,
    LogonRejectReason,
    Price,
    PriceFlags,
    Quote,
    RejectReason,
    encode,
    messages,
    schema,
)
from pricewire_client.codec import raw_frame

from conftest import FEED_TOKEN
from helpers import Prov, Sess, connect, logged_on, new_provider, next_named, release, until_closed
from server import Server

pytestmark = pytest.mark.usefixtures("alongside", "api")

GBPUSD, EURGBP, GBPJPY, EURCHF, AUDJPY, USDSGD, USDMXN, XAGUSD = 1, 7, 9, 10, 11, 12, 13, 15


_opened: list[Prov] = []


def feed(srv: Server) -> Prov:
    """A provider connection, not logged on; logged out after the test."""
    prov = new_provider("127.0.0.1", srv.feed_port)
    _opened.append(prov)
    return prov


@pytest.fixture(autouse=True)
def _release_provider_ids() -> Iterator[None]:
    """One session per provider id (§7): free every id a test held before the next one."""
    yield
    while _opened:
        release(_opened.pop())


def subscribed(srv: Server, symbol: int, tier: int = 0) -> Sess:
    sess = logged_on(srv)
    assert sess.subscribe([symbol], tier).results[0].ok
    return sess


def price_of(sess: Sess, symbol: int, timeout_s: float = 3.0) -> Price:
    msg = sess.wait_for(lambda m: isinstance(m, Price) and m.symbol_id == symbol, timeout_s)
    assert msg is not None, f"no price of symbol {symbol}"
    return msg


def test_provider_logon_accepted(server: Server) -> None:
    prov = feed(server)
    acc = prov.logon(2, FEED_TOKEN)
    assert acc.name == "LogonAccepted" and acc.heartbeat_interval_ms > 0


def test_one_session_per_provider_id(server: Server) -> None:
    """§7: a providerId names one feed; a second session with it is refused
    LogonRejected(session_limit) while the first holds it, and accepted once it is gone."""
    first = feed(server)
    first.logon(2, FEED_TOKEN)
    second = feed(server)
    with pytest.raises(LogonRefused) as err:
        second.logon(2, FEED_TOKEN)
    assert err.value.code == LogonRejectReason.SESSION_LIMIT
    until_closed(second)
    first.send(messages.logout())
    until_closed(first)
    third = feed(server)
    assert third.logon(2, FEED_TOKEN).name == "LogonAccepted"


@pytest.mark.parametrize("provider_id,token", [(1, "wrong"), (500, FEED_TOKEN)])
def test_provider_logon_refused_auth(server: Server, provider_id: int, token: str) -> None:
    prov = feed(server)
    with pytest.raises(LogonRefused) as err:
        prov.logon(provider_id, token)
    assert err.value.answer.name == "LogonRejected"
    assert err.value.answer.reason == LogonRejectReason.AUTH
    until_closed(prov)


def test_quotes_become_prices_with_provider_count(server: Server, provider: Prov, api: str) -> None:
    # A symbol of its own per API run: a quote of provider 2 from the other run would stay
    # the best of the book and count as a second provider.
    symbol = EURGBP if api == "sync" else GBPUSD
    sess = subscribed(server, symbol)
    provider.quote([Quote(symbol, 85_000, 85_010)])
    first = price_of(sess, symbol)
    assert first.providers == 1 and first.flags & PriceFlags.SINGLE_PROVIDER
    other = feed(server)
    other.logon(2, FEED_TOKEN)
    other.quote([Quote(symbol, 85_001, 85_009)])
    both = sess.wait_for(lambda m: m.name == "PriceUpdate" and m.providers == 2, 3)
    assert both is not None, "second provider never counted"
    assert not both.flags & PriceFlags.SINGLE_PROVIDER
    assert both.bid == 85_001 and both.ask == 85_009  # best of both, raw tier


def test_indicative_quote_gives_an_indicative_price(server: Server, provider: Prov) -> None:
    sess = subscribed(server, XAGUSD)
    provider.quote([Quote(XAGUSD, 24_000, 24_010, indicative=True)])
    assert price_of(sess, XAGUSD).indicative


def test_unknown_symbol_quotes_are_ignored(server: Server, provider: Prov) -> None:
    sess = subscribed(server, GBPJPY)
    provider.quote([Quote(999, 1, 2), Quote(GBPJPY, 190_000, 190_010)])
    assert price_of(sess, GBPJPY).bid == 190_000


def test_quote_without_a_fresh_requote_goes_stale(server: Server) -> None:
    prov = feed(server)
    prov.logon(2, FEED_TOKEN)
    sess = subscribed(server, USDMXN)
    prov.quote([Quote(USDMXN, 1_700_000, 1_700_100, provider_time_ns=time.time_ns())])
    # The subscription's snapshot may repeat an earlier run's stale price: this quote's is
    # fresh.
    fresh = sess.wait_for(
        lambda m: isinstance(m, Price) and m.symbol_id == USDMXN and not m.stale, 3
    )
    assert fresh is not None, "the fresh quote was never priced"
    stale = sess.wait_for(  # --max-quote-age-ms defaults to 2000
        lambda m: isinstance(m, Price) and m.stale, 5
    )
    assert stale is not None, "price never flagged stale"


def test_one_sided_quote_is_refused_with_invalid_quote(server: Server, provider: Prov) -> None:
    """§7: the engine prices two-sided books only; a one-sided entry is refused and the
    provider told, while the batch's good entries are used."""
    sess = subscribed(server, EURCHF)
    provider.quote([Quote(EURCHF, schema.NO_PRICE, 95_010), Quote(EURCHF, 95_000, 95_012)])
    rej = next_named(provider, "Reject")
    assert rej.reason == RejectReason.INVALID_QUOTE
    assert rej.ref_template_id == 31 and "one_sided" in rej.text, rej
    assert price_of(sess, EURCHF).ask == 95_012


def test_crossed_quote_is_refused_with_invalid_quote(server: Server, provider: Prov) -> None:
    """§7: a crossed entry (bid above ask) is refused, counted and the provider told."""
    sess = subscribed(server, AUDJPY)
    provider.quote([Quote(AUDJPY, 100_010, 100_000)])
    rej = next_named(provider, "Reject")
    assert rej.reason == RejectReason.INVALID_QUOTE and "crossed" in rej.text
    assert sess.wait_for(lambda m: isinstance(m, Price) and m.symbol_id == AUDJPY, 0.3) is None


def test_quote_rejects_are_limited_per_second(server: Server, provider: Prov) -> None:
    """§7: at most 10 invalid_quote Rejects a second per session, however many bad batches."""
    for _ in range(40):
        provider.quote([Quote(AUDJPY, 100_010, 100_000)])
    provider.heartbeat_ms = 0
    seen = []
    while (m := provider.wait_for(lambda m: m.name == "Reject", 0.3)) is not None:
        seen.append(m)
    assert 1 <= len(seen) <= 10, len(seen)


def test_malformed_quote_is_rejected(server: Server, provider: Prov) -> None:
    provider.send(raw_frame(31, struct.pack("<HH", 43, 2) + b"\0" * 43, 0))
    rej = next_named(provider, "Reject")
    assert rej.reason == RejectReason.MALFORMED


def test_malformed_quote_reject_names_the_template(server: Server, provider: Prov) -> None:
    provider.send(raw_frame(31, struct.pack("<HH", 43, 2) + b"\0" * 43, 0))
    assert next_named(provider, "Reject").ref_template_id == 31


def test_quote_before_logon_is_rejected_not_logged_on(server: Server) -> None:
    prov = feed(server)
    prov.quote([Quote(USDSGD, 134_000, 134_010)])
    rej = next_named(prov, "Reject")
    assert rej.reason == RejectReason.NOT_LOGGED_ON


def test_quote_before_logon_reject_names_the_template(server: Server) -> None:
    prov = feed(server)
    prov.quote([Quote(USDSGD, 134_000, 134_010)])
    assert next_named(prov, "Reject").ref_template_id == 31


@pytest.mark.parametrize("payload", [b"\xff\xff\xff\xff", b"GET / HTTP/1.1\r\n\r\n"])
def test_feed_port_framing_error_ends_with_disconnect(server: Server, payload: bytes) -> None:
    prov = feed(server)
    prov.logon(2, FEED_TOKEN)
    prov.send(payload)
    seen = until_closed(prov)
    assert [m.name for m in seen][-2:] == ["Reject", "Disconnect"], seen
    assert seen[-1].reason == DisconnectReason.PROTOCOL_ERROR


def test_feed_port_takes_frames_up_to_64_kib(server: Server, provider: Prov) -> None:
    """§2: 64 KiB on the provider ingest listener (the subscriber listener's 16 KiB is lower)."""
    sess = subscribed(server, GBPJPY)
    quotes = [Quote(999, 1, 2)] * 1000 + [Quote(GBPJPY, 190_000, 190_012)]  # 43 KB
    provider.quote(quotes)
    got = sess.wait_for(lambda m: isinstance(m, Price) and m.ask == 190_012, 3)
    assert got is not None and got.symbol_id == GBPJPY, "the 43 KB batch was not read"


def test_feed_port_frame_above_64_kib_is_frame_too_large(server: Server) -> None:
    prov = feed(server)
    prov.logon(2, FEED_TOKEN)
    prov.send(raw_frame(31, b"", 0, length=65537))
    seen = until_closed(prov)
    assert seen and seen[0].name == "Reject", seen
    assert seen[0].reason == RejectReason.FRAME_TOO_LARGE


def test_feed_port_framing_error_is_rejected_and_closed(server: Server) -> None:
    prov = feed(server)
    prov.logon(2, FEED_TOKEN)
    prov.send(b"\xff\xff\xff\xff")
    seen = until_closed(prov)
    rejects = [m for m in seen if m.name == "Reject"]
    assert rejects and rejects[0].reason == RejectReason.FRAME_TOO_LARGE, seen


def test_subscriber_message_on_the_feed_port_is_unexpected(server: Server) -> None:
    prov = feed(server)
    prov.logon(2, FEED_TOKEN)
    prov.send(encode(messages.subscribe(5, [0])))
    rej = next_named(prov, "Reject")
    assert rej.reason == RejectReason.UNEXPECTED_MESSAGE


def test_subscriber_logon_on_the_feed_port_reject_names_the_template(server: Server) -> None:
    prov = feed(server)
    prov.logon(2, FEED_TOKEN)
    prov.send(encode(messages.logon("demo", "demo")))
    rej = next_named(prov, "Reject")
    assert rej.reason == RejectReason.UNEXPECTED_MESSAGE
    assert rej.ref_template_id == 1


def test_subscriber_logon_on_the_feed_port_is_unexpected(server: Server) -> None:
    prov = feed(server)
    prov.send(encode(messages.logon("demo", "demo")))
    assert next_named(prov, "Reject").reason == RejectReason.UNEXPECTED_MESSAGE


def test_provider_logon_on_the_subscriber_port_is_unexpected(server: Server) -> None:
    sess = connect(server)
    sess.send(messages.provider_logon(1, FEED_TOKEN))
    assert next_named(sess, "Reject").reason == RejectReason.UNEXPECTED_MESSAGE


def test_provider_logon_on_a_logged_on_subscriber_is_unexpected(server: Server) -> None:
    sess = logged_on(server)
    sess.send(messages.provider_logon(1, FEED_TOKEN))
    rej = next_named(sess, "Reject")
    assert rej.reason == RejectReason.UNEXPECTED_MESSAGE
    assert rej.ref_template_id == 30


def test_heartbeat_before_provider_logon_is_allowed(server: Server) -> None:
    prov = feed(server)
    prov.send(messages.heartbeat())
    assert prov.logon(2, FEED_TOKEN).name == "LogonAccepted"


def test_silent_provider_is_heartbeated_then_dropped(server: Server) -> None:
    prov = feed(server)
    interval_s = prov.logon(2, FEED_TOKEN).heartbeat_interval_ms / 1000
    prov.heartbeat_ms = 0  # the provider falls silent
    first = prov.wait_for(lambda m: m.name in ("Heartbeat", "Disconnect"), interval_s * 1.6)
    assert first is not None and first.name == "Heartbeat", first
    disc = prov.wait_for(lambda m: m.name == "Disconnect", interval_s * 2.5)
    assert disc is not None and disc.reason == DisconnectReason.IDLE_TIMEOUT
