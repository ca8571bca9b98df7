"""Conformance: every subscriber message type and the outcomes protocol.md promises for it,
against the real server (built-in symbols: EURUSD 0, GBPUSD 1, USDJPY 2, ...)."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pricewire_client import (
    DisconnectReason,
    LogonRefused,
    LogonRejectReason,
    Message,
    Price,
    PriceFlags,
    Quote,
    Reject,
    RejectReason,
    RequestRejected,
    SubscribeStatus,
    decode,
    encode,
    messages,
    schema,
)
from pricewire_client.codec import raw_frame
from pricewire_client.model import from_message

from helpers import (
    Prov,
    Sess,
    connect,
    logged_on,
    next_named,
    quote_until,
    until_closed,
    write_raw,
)
from server import Server

pytestmark = pytest.mark.usefixtures("api")

USDJPY, USDCHF, AUDUSD, USDCAD = 2, 3, 4, 5


def test_logon_accepted_fields(server: Server) -> None:
    sess = connect(server)
    before = time.time_ns()
    acc = sess.logon(heartbeat_ms=0)
    assert acc.heartbeat_interval_ms == 1000  # 0 asks for the server default
    assert acc.session_id >= 0
    assert abs(acc.server_time_ns - before) < 60 * 10**9
    assert acc.default_tier == 1  # the account's first tier, "standard"
    second = connect(server).logon()
    assert second.session_id != acc.session_id


def test_logon_with_a_bad_token_is_rejected_auth_without_floor(server: Server) -> None:
    sess = connect(server)
    with pytest.raises(LogonRefused) as err:
        sess.logon("demo", "wrong")
    assert err.value.answer.name == "LogonRejected"
    assert err.value.code == LogonRejectReason.AUTH and err.value.reason == "auth"
    assert err.value.retry_after == 0
    assert str(err.value) == "logon refused: auth"
    until_closed(sess)


def test_logon_of_an_unknown_account_is_rejected_auth(server: Server) -> None:
    with pytest.raises(LogonRefused) as err:
        connect(server).logon("nobody", "x")
    assert err.value.answer.reason == LogonRejectReason.AUTH


def test_logon_of_an_account_without_entitlement_is_rejected_not_entitled(server: Server) -> None:
    """§4.2: LogonRejected(not_entitled) for an account that may see no symbol, no floor."""
    sess = connect(server)
    with pytest.raises(LogonRefused) as err:
        sess.logon("nomd", "n2")
    assert err.value.reason == "not_entitled"
    assert err.value.answer.retry_after_ms == 0
    until_closed(sess)


def test_session_limit_rejects_with_a_retry_floor(server: Server) -> None:
    first = connect(server)
    first.logon("narrow", "n1")
    try:
        with pytest.raises(LogonRefused) as err:
            connect(server).logon("narrow", "n1")
        assert err.value.code == LogonRejectReason.SESSION_LIMIT
        assert err.value.retry_after > 0
        assert str(err.value).startswith("logon refused: session_limit, retry after ")
    finally:
        first.logout()


def test_second_logon_is_rejected_already_logged_on(session: Sess) -> None:
    session.send(messages.logon("demo", "demo"))
    rej = next_named(session, "Reject")
    assert rej.reason == RejectReason.ALREADY_LOGGED_ON
    assert rej.ref_template_id == 1
    assert session.symbols().name == "SymbolDirectory"  # the session goes on


def test_request_before_logon_is_rejected_not_logged_on(server: Server) -> None:
    sess = connect(server)
    sess.send(messages.symbol_list_request(11))
    rej = next_named(sess, "Reject")
    assert rej.reason == RejectReason.NOT_LOGGED_ON
    assert rej.ref_template_id == 10


def test_reject_not_logged_on_echoes_the_request_id(server: Server) -> None:
    sess = connect(server)
    sess.send(messages.subscribe(12, [0]))
    rej = next_named(sess, "Reject")
    assert rej.reason == RejectReason.NOT_LOGGED_ON
    assert rej.request_id == 12


def test_heartbeat_before_logon_is_allowed(server: Server) -> None:
    sess = connect(server)
    sess.send(messages.heartbeat())
    acc = sess.logon()
    assert acc.name == "LogonAccepted"


def test_logout_is_answered_disconnect_logout(session: Sess) -> None:
    disc = session.logout()
    assert disc is not None and disc.name == "Disconnect"
    assert disc.reason == DisconnectReason.LOGOUT and disc.reason_name == "logout"
    assert disc.retry_after_ms == 0
    until_closed(session)


def test_server_heartbeats_when_idle(server: Server) -> None:
    sess = logged_on(server, heartbeat_ms=300)
    interval = sess.heartbeat_ms
    assert 0 < interval <= 1000
    start = time.monotonic()
    next_named(sess, "Heartbeat", timeout_s=interval / 1000 * 2.5)
    assert time.monotonic() - start >= interval / 1000 * 0.5


def test_silent_client_is_disconnected_idle_timeout(server: Server) -> None:
    sess = logged_on(server, heartbeat_ms=200)
    interval_s = sess.heartbeat_ms / 1000
    sess.heartbeat_ms = 0  # stop heartbeating: the client falls silent
    start = time.monotonic()
    seen = until_closed(sess, timeout_s=interval_s * 3 + 3)
    disc = [m for m in seen if m.name == "Disconnect"]
    assert disc and disc[-1].reason == DisconnectReason.IDLE_TIMEOUT, seen
    assert time.monotonic() - start >= interval_s * 3 * 0.9


def test_symbol_directory(session: Sess) -> None:
    d = session.symbols()
    assert d.name == "SymbolDirectory"
    syms = {s.name: s for s in d.symbols}
    assert syms["EURUSD"].digits == 5 and syms["EURUSD"].symbol_id == 0
    assert syms["USDJPY"].digits == 3
    assert d.symbol("USDJPY") == syms["USDJPY"] and d.symbol(0) == syms["EURUSD"]
    assert [t.name for t in d.tiers] == ["raw", "standard", "retail"]


def test_symbol_directory_is_limited_to_the_account(server: Server) -> None:
    sess = connect(server)
    sess.logon("narrow", "n1")
    try:
        d = sess.symbols()
        assert [s.name for s in d.symbols] == ["EURUSD", "GBPUSD"]
        assert [t.tier_id for t in d.tiers] == [2]
    finally:
        sess.logout()


def test_subscribe_answers_in_order_then_snapshot_then_updates(
    session: Sess, provider: Prov
) -> None:
    provider.quote([Quote(USDJPY, 150_100, 150_110)])
    resp = session.subscribe(["USDJPY", 99, "NOPE"], tier=0)
    assert resp.name == "SubscribeResponse"
    res = resp.results
    assert [(r.symbol_id, r.status) for r in res] == [
        (USDJPY, SubscribeStatus.OK),
        (99, SubscribeStatus.UNKNOWN_SYMBOL),
        (schema.BY_NAME, SubscribeStatus.UNKNOWN_SYMBOL),
    ]
    assert res[0].name == "USDJPY" and res[2].name == "NOPE"
    assert [r.ok for r in res] == [True, False, False] and res[1].status_name == "unknown_symbol"
    snap = next_named(session, "PriceSnapshot", "PriceUpdate")
    assert snap.name == "PriceSnapshot" and snap.tier == 0 and snap.digits == 3
    assert snap.seq >= 1 and snap.snapshot and snap.status == "snapshot"
    assert str(snap.ask_decimal) == "150.110"  # 3 digits; the bid may be an earlier run's
    assert snap.bid_decimal == Decimal(snap.bid) / 1000
    if snap.bid != 150_100:
        # The quote reached the engine after the snapshot was read (a
        # loaded host): its price follows as an update; start from it.
        snap = session.wait_for(
            lambda m: isinstance(m, Price) and m.symbol_id == USDJPY and m.bid == 150_100, 5
        )
        assert snap is not None, "the quote's price never came"
    upd = quote_until(session, provider, Quote(USDJPY, 150_101, 150_110), "PriceUpdate")
    assert upd.seq == snap.seq + 1 and upd.status == "ok"
    assert upd.bid == 150_101 and upd.ask == 150_110
    assert upd.flags & PriceFlags.SINGLE_PROVIDER
    assert session.tracker.gaps == []


def test_default_tier_subscription_delivers_the_default_tier(session: Sess, provider: Prov) -> None:
    provider.quote([Quote(USDCHF, 90_000, 90_010)])
    assert session.subscribe([USDCHF]).results[0].status == SubscribeStatus.OK
    snap = next_named(session, "PriceSnapshot")
    assert snap.tier == session.accepted.default_tier


def test_all_tiers_share_one_sequence(session: Sess, provider: Prov) -> None:
    provider.quote([Quote(AUDUSD, 65_000, 65_010)])
    for tier in (0, 1, 2):
        assert session.subscribe([AUDUSD], tier).results[0].ok
    provider.quote([Quote(AUDUSD, 65_001, 65_010)])
    seqs: dict[int, int] = {}
    deadline = time.monotonic() + 3
    while len(seqs) < 3 and time.monotonic() < deadline:
        msg = session.recv(0.5)
        if isinstance(msg, Price) and not msg.snapshot and msg.symbol_id == AUDUSD:
            seqs[msg.tier] = msg.seq
    assert len(set(seqs.values())) == 1 and len(seqs) == 3, seqs


def test_subscribe_unentitled_symbol_and_tier(server: Server) -> None:
    sess = connect(server)
    sess.logon("narrow", "n1")
    try:
        res = sess.subscribe(["EURUSD", "USDJPY"]).results
        assert [r.status for r in res] == [SubscribeStatus.OK, SubscribeStatus.NOT_ENTITLED]
        res = sess.subscribe(["EURUSD"], tier=0).results
        assert res[0].status == SubscribeStatus.TIER_NOT_ENTITLED
    finally:
        sess.logout()


def test_subscription_limit_reached(server: Server) -> None:
    sess = logged_on(server)
    statuses = []
    for tier in (0, 1, 2):  # 25 symbols x 3 tiers = 75 > --max-subscriptions 64
        resp = sess.subscribe(list(range(25)), tier)
        statuses += [r.status for r in resp.results]
    assert statuses.count(SubscribeStatus.LIMIT_REACHED) == 75 - 64
    assert statuses.count(SubscribeStatus.OK) == 64
    sess.close()


def test_subscribe_by_id_echoes_the_resolved_name(session: Sess) -> None:
    res = session.subscribe([USDJPY]).results
    assert res[0].name == "USDJPY"


def test_subscribe_with_mismatched_id_and_name_is_refused(session: Sess) -> None:
    msg = messages.subscribe(77, [0])
    msg.groups["entries"][0]["name"] = "GBPUSD"
    session.send(msg)
    resp = next_named(session, "SubscribeResponse")
    assert resp.results[0].status != SubscribeStatus.OK


def test_unsubscribe_stops_updates(session: Sess, provider: Prov) -> None:
    provider.quote([Quote(USDCAD, 135_000, 135_010)])
    session.subscribe([USDCAD], 0)
    snap = next_named(session, "PriceSnapshot")
    if snap.bid != 135_000:
        # The quote reached the engine after the snapshot was read (a
        # loaded host): its price follows as an update while subscribed,
        # and must not be taken for one after the unsubscribe.
        quoted = session.wait_for(
            lambda m: isinstance(m, Price) and m.symbol_id == USDCAD and m.bid == 135_000, 5
        )
        assert quoted is not None, "the quote's price never came"
    resp = session.unsubscribe([USDCAD], 0)
    assert resp.name == "SubscribeResponse"
    assert resp.results[0].status == SubscribeStatus.OK
    again = session.unsubscribe([USDCAD], 0)
    assert again.results[0].status == SubscribeStatus.NOT_SUBSCRIBED
    provider.quote([Quote(USDCAD, 135_001, 135_010)])
    marker = session.symbols()  # answered after the quote had time to fan out
    assert marker.name == "SymbolDirectory"
    late = session.wait_for(lambda m: isinstance(m, Price) and m.symbol_id == USDCAD, 0.3)
    assert late is None


def test_subscribing_twice_sends_a_snapshot_again(session: Sess, provider: Prov) -> None:
    """§3 SubscribeResponse: for every entry with status ok a PriceSnapshot follows."""
    provider.quote([Quote(USDCAD, 135_000, 135_010)])
    for _ in range(2):
        assert session.subscribe([USDCAD], 1).results[0].ok
        next_named(session, "PriceSnapshot", timeout_s=1.0)


def test_unsubscribe_by_name_and_unknown_tier(session: Sess) -> None:
    assert session.subscribe(["USDCAD"], 2).results[0].ok
    res = session.unsubscribe(["USDCAD"], 2).results[0]
    assert (res.symbol_id, res.name, res.status) == (USDCAD, "USDCAD", 0)
    res = session.subscribe([USDCAD], 9).results[0]
    assert res.status == SubscribeStatus.TIER_NOT_ENTITLED


def test_newer_client_blocks_are_skipped_by_blocklength(session: Sess) -> None:
    """§2: the receiver uses the header's blockLength; a newer version may append fields."""
    body = encode(messages.symbol_list_request(77))[14:] + b"\xee" * 7
    session.send(raw_frame(10, body, 20, version=2))
    assert next_named(session, "SymbolDirectory").request_id == 77
    body = struct.pack("<QB", 78, 0) + struct.pack("<HH", 20, 1)
    body += struct.pack("<H16s", USDCAD, b"") + b"\xee\xee"
    session.send(raw_frame(12, body, 9))
    res = next_named(session, "SubscribeResponse")
    assert res.request_id == 78 and res.results[0].symbol_id == USDCAD


def test_connection_without_logon_is_closed(server: Server) -> None:
    sess = connect(server)  # the suite's server: --logon-timeout-ms 1500
    start = time.monotonic()
    seen = until_closed(sess, timeout_s=4)
    assert time.monotonic() - start >= 1.0
    disc = [m for m in seen if m.name == "Disconnect"]
    assert disc and disc[-1].reason == DisconnectReason.LOGON_TIMEOUT, seen
    assert 1_000 <= disc[-1].retry_after_ms <= 5_000  # §4.2


def test_snapshot_request_carries_the_stream_seq(session: Sess, provider: Prov) -> None:
    provider.quote([Quote(6, 60_000, 60_010)])
    session.subscribe([6], 2)
    snap = next_named(session, "PriceSnapshot")
    resp = session.snapshot([6, 14], tier=2, budget_us=1_000_000)
    assert resp.name == "SnapshotResponse"
    assert [p.symbol_id for p in resp.prices] == [6]  # symbol 14 is never quoted: left out
    assert resp.prices[0].seq == snap.seq and resp.prices[0].tier == 2
    assert resp.prices[0].bid == snap.bid and resp.prices[0].status == "untracked"


@pytest.mark.usefixtures("feeder")
def test_snapshot_request_leaves_unknown_symbols_out(session: Sess) -> None:
    deadline = time.monotonic() + 3
    while True:  # EURUSD: the background feed quotes it from its start
        resp = session.snapshot([0, 999])
        if resp.prices or time.monotonic() > deadline:
            break
    assert [p.symbol_id for p in resp.prices] == [0]


def test_snapshot_request_with_an_unknown_symbol_only(session: Sess) -> None:
    try:
        assert session.snapshot([999]).prices == ()
    except RequestRejected as err:
        assert err.reason == "unknown_symbol"


def test_snapshot_leaves_unentitled_symbols_out(server: Server) -> None:
    """§3 SnapshotResponse: symbols without a price or not entitled are left out."""
    sess = connect(server)
    sess.logon("narrow", "n1")
    try:
        resp = sess.snapshot([0, USDJPY])
        assert USDJPY not in [p.symbol_id for p in resp.prices]
    finally:
        sess.logout()


def test_snapshot_of_unentitled_symbol_is_not_served(server: Server) -> None:
    sess = connect(server)
    sess.logon("narrow", "n1")
    try:
        assert sess.snapshot([USDJPY]).prices == ()
    except RequestRejected as err:
        assert err.code == RejectReason.NOT_ENTITLED
    finally:
        sess.logout()


def test_snapshot_request_holds_at_most_32_symbols(session: Sess) -> None:
    """§3 SnapshotRequest: at most 32 symbol ids; more is Reject(limit_reached)."""
    assert session.snapshot((list(range(25)) * 2)[:32]).name == "SnapshotResponse"
    with pytest.raises(RequestRejected) as err:
        session.snapshot((list(range(25)) * 2)[:33])
    assert err.value.code == RejectReason.LIMIT_REACHED and err.value.reason == "limit_reached"
    assert err.value.answer.ref_template_id == 17 and err.value.request_id > 0


def test_too_many_symbols_in_a_snapshot_is_limit_reached(session: Sess) -> None:
    with pytest.raises(RequestRejected) as err:
        session.snapshot([0] * 5000)
    assert err.value.answer.reason == RejectReason.LIMIT_REACHED


@pytest.mark.usefixtures("feeder")
def test_snapshot_at_the_default_tier(session: Sess) -> None:
    deadline = time.monotonic() + 3
    while True:  # EURUSD: the background feed quotes it from its start
        resp = session.snapshot([0])
        if resp.prices or time.monotonic() > deadline:
            break
    assert [p.tier for p in resp.prices] == [session.accepted.default_tier]


def test_snapshot_of_an_unknown_tier_is_not_entitled(session: Sess) -> None:
    with pytest.raises(RequestRejected) as err:
        session.snapshot([0], tier=9)
    assert err.value.code == RejectReason.NOT_ENTITLED


def test_history_oldest_first_at_most_count(session: Sess, provider: Prov) -> None:
    base = 7_000
    for i in range(5):
        provider.quote([Quote(8, 160_000 + i, 160_020, provider_time_ns=base + i)])
    session.snapshot([8])  # the feed is processed in order before the answer
    resp = session.history(8, 3)
    assert resp.name == "HistoryResponse"
    assert resp.symbol_id == 8 and resp.digits == 3
    assert [t.bid for t in resp.ticks] == [160_002, 160_003, 160_004]
    assert [str(t.bid_decimal) for t in resp.ticks] == ["160.002", "160.003", "160.004"]
    assert all(t.provider == 1 for t in resp.ticks)


def test_history_of_an_unknown_symbol_is_rejected(session: Sess) -> None:
    with pytest.raises(RequestRejected) as err:
        session.history(999, 5)
    assert err.value.code == RejectReason.UNKNOWN_SYMBOL
    assert err.value.ref_template_id == 19


def rejected_reason(call: Callable[[], object]) -> str:
    """The reason name of the RequestRejected ``call`` raises ("" when it is served)."""
    try:
        call()
    except RequestRejected as err:
        return err.reason
    return ""


def test_expired_budget_is_rejected_deadline_expired(session: Sess) -> None:
    # A 1 us budget runs out before any worker can serve it.
    reasons = [rejected_reason(lambda: session.snapshot([0], budget_us=1)) for _ in range(20)]
    assert reasons.count("deadline_expired") >= 15, reasons


def test_symbol_list_honours_its_budget(session: Sess) -> None:
    assert rejected_reason(lambda: session.symbols(budget_us=1)) == "deadline_expired"


def test_history_honours_its_budget(session: Sess) -> None:
    reasons = [rejected_reason(lambda: session.history(0, 5, budget_us=1)) for _ in range(20)]
    assert sum(r != "" for r in reasons) >= 15, reasons


def test_account_request_rate_is_rejected_rate_limited(tmp_path: Path) -> None:
    """300 requests in one write against the account's burst of 200 (its bucket full: a
    server of its own). Those over the rate are refused rate_limited, by the account's rate
    and then inside the window that refusal opened, and the session is not cut: a client with
    100 requests in flight when refused has at most 100 refusals in a row (§4.2)."""
    srv = Server(tmp_path)
    try:
        sess = logged_on(srv)
        data = b"".join(encode(messages.snapshot_request(i, [0])) for i in range(1, 301))
        write_raw(sess, data)
        answers: dict[int, Any] = {}
        while len(answers) < 300:
            msg = sess.wait_for(lambda m: m.name in ("SnapshotResponse", "Reject", "Disconnect"), 3)
            assert msg is not None and msg.name != "Disconnect", (len(answers), msg)
            answers[msg.request_id] = msg
        limited = [m for m in answers.values() if isinstance(m, Reject)]
        assert limited, "no Reject after 300 pipelined requests"
        # Over the account's rate: rate_limited. A burst this deep can also find the
        # account's share of the request path full first: overloaded. Both tell the
        # client to back off (§4.2), never anything else.
        backoff = (RejectReason.RATE_LIMITED, RejectReason.OVERLOADED)
        assert all(m.reason in backoff for m in limited), [m.reason for m in limited]
        assert all(m.retry_after_ms > 0 for m in limited)
        assert set(answers) == set(range(1, 301))
        sess.close()
    finally:
        srv.stop()


def test_worked_examples_agree_with_the_server(session: Sess) -> None:
    """The §8 story (subscribe at the default tier, EURUSD ok, its snapshot) holds on the
    server the doc describes: same symbol ids, and the snapshot at the default tier."""
    from test_codec import EXAMPLES, parse_dump

    def example(name: str) -> Message:
        return decode(parse_dump(EXAMPLES[name])[0])

    deadline = time.monotonic() + 10
    while True:  # the account's request bucket may still be spent by the test before
        try:
            directory = session.symbols()
            break
        except RequestRejected as err:
            if err.reason != "rate_limited" or time.monotonic() > deadline:
                raise
            # §4.2: wait the floor, then retry — heartbeating while waiting (a bare sleep
            # longer than the dead-peer interval is rightly cut as a silent peer).
            session.wait_for(lambda _m: False, err.retry_after)
    syms = {s.name: s.symbol_id for s in directory.symbols}
    typed = from_message(example("subscribe_response"))
    assert [r.symbol_id for r in typed.results] == [  # type: ignore[union-attr]
        e["symbolId"] for e in example("subscribe_response").groups["results"]
    ]
    results = example("subscribe_response").groups["results"]
    for entry in results:
        if entry["status"] == SubscribeStatus.OK:
            assert syms[str(entry["name"])] == entry["symbolId"], entry
        else:  # the example's unknown id is unknown to the server too
            assert entry["symbolId"] not in syms.values(), entry
    assert any(e["status"] == SubscribeStatus.OK for e in results)
    assert example("price_snapshot").int("tier") == example("logon_accepted").int("defaultTier")
