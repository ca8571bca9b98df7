"""Conformance: bad input on the subscriber port gets the answer protocol.md promises, and a
good subscriber on the same server (fixture ``alongside``) sees no sequence gap meanwhile.

Framing errors (§6 "Which errors close the connection"): Reject with the reason, then
Disconnect(protocol_error), then the server closes. Bad bodies: a Reject with the reason."""

from __future__ import annotations

import struct
import threading

import pytest

from pricewire_client import (
    DisconnectReason,
    Incoming,
    LogonRefused,
    Message,
    Price,
    PricewireError,
    ProviderSession,
    Quote,
    Reject,
    RejectReason,
    encode,
    messages,
)
from pricewire_client.codec import raw_frame, sofh

import helpers
from conftest import FEED_TOKEN, GoodSubscriber
from helpers import (
    Sess,
    connect,
    deadline_poll,
    logged_on,
    names,
    next_named,
    release,
    until_closed,
    write_raw,
)
from server import Server

pytestmark = pytest.mark.usefixtures("alongside", "api")


def assert_framing_error(sess: Sess, reason: RejectReason) -> None:
    seen = until_closed(sess)
    assert [m.name for m in seen][-2:] == ["Reject", "Disconnect"], seen
    assert seen[-2].reason == reason, seen
    assert seen[-1].reason == DisconnectReason.PROTOCOL_ERROR, seen


@pytest.mark.parametrize("logon_first", [False, True], ids=["before_logon", "after_logon"])
def test_garbage_is_a_framing_error(server: Server, logon_first: bool) -> None:
    sess = logged_on(server) if logon_first else connect(server)
    sess.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # 'GET ' read as a length: too large
    assert_framing_error(sess, RejectReason.FRAME_TOO_LARGE)


@pytest.mark.parametrize("logon_first", [False, True], ids=["before_logon", "after_logon"])
def test_length_below_the_header_is_frame_too_small(server: Server, logon_first: bool) -> None:
    sess = logged_on(server) if logon_first else connect(server)
    sess.send(sofh(10) + b"\0" * 4)
    assert_framing_error(sess, RejectReason.FRAME_TOO_SMALL)


@pytest.mark.parametrize("logon_first", [False, True], ids=["before_logon", "after_logon"])
def test_length_ffffffff_is_frame_too_large(server: Server, logon_first: bool) -> None:
    sess = logged_on(server) if logon_first else connect(server)
    sess.send(b"\xff\xff\xff\xff")  # refused from the length alone: no body is waited for
    assert_framing_error(sess, RejectReason.FRAME_TOO_LARGE)


def test_frame_above_the_listener_limit_is_frame_too_large(server: Server) -> None:
    sess = logged_on(server)
    sess.send(sofh(16385))
    assert_framing_error(sess, RejectReason.FRAME_TOO_LARGE)


def test_frame_at_the_listener_limit_is_read(server: Server) -> None:
    sess = logged_on(server)
    body = struct.pack("<QB", 5, 0xFF) + struct.pack("<HH", 18, 0) + b"\0" * (16384 - 27)
    sess.send(raw_frame(12, body, 9))  # an empty Subscribe padded with trailing bytes
    resp = next_named(sess, "SubscribeResponse", "Reject")
    assert resp.name == "SubscribeResponse" and resp.request_id == 5, resp


@pytest.mark.parametrize("logon_first", [False, True], ids=["before_logon", "after_logon"])
def test_wrong_encoding_type_is_bad_encoding_type(server: Server, logon_first: bool) -> None:
    sess = logged_on(server) if logon_first else connect(server)
    frame = bytearray(encode(messages.heartbeat()))
    frame[4:6] = b"\xeb\x51"
    sess.send(bytes(frame))
    assert_framing_error(sess, RejectReason.BAD_ENCODING_TYPE)


def test_unknown_template_before_logon(server: Server) -> None:
    sess = connect(server)
    sess.send(raw_frame(99, b"", 0))
    rej = next_named(sess, "Reject")
    assert rej.reason in (RejectReason.UNKNOWN_TEMPLATE, RejectReason.NOT_LOGGED_ON)
    assert rej.ref_template_id == 99


def test_unknown_template_after_logon_keeps_the_session(server: Server) -> None:
    sess = logged_on(server)
    sess.send(raw_frame(99, b"\0" * 8, 8))
    rej = next_named(sess, "Reject")
    assert rej.reason == RejectReason.UNKNOWN_TEMPLATE
    assert rej.ref_template_id == 99
    assert sess.symbols().name == "SymbolDirectory"


def test_repeated_unknown_templates_are_bounded(server: Server) -> None:
    sess = logged_on(server)
    # §6: the server may close if such frames repeat; #17: it must (one write: the server
    # closes while they arrive, and a later write would find the connection gone).
    sess.send(raw_frame(99, b"", 0) * 300)
    seen = until_closed(sess)
    assert seen[-1].name == "Disconnect", [m.name for m in seen[-3:]]
    rejects = [m for m in seen if isinstance(m, Reject)]
    assert len(rejects) == 11  # §6: --bad-frame-limit 10 answered, the 11th disconnects
    assert all(r.ref_template_id == 99 for r in rejects)
    assert seen[-1].reason == DisconnectReason.PROTOCOL_ERROR
    assert 1_000 <= seen[-1].retry_after_ms <= 5_000  # §4.2


@pytest.mark.parametrize(
    "header",
    [{"schema_id": 0x1234}, {"version": 0}],
    ids=["unknown_schema", "unsupported_version"],
)
def test_bad_schema_or_version_is_rejected(server: Server, header: dict[str, int]) -> None:
    sess = logged_on(server)
    body = encode(messages.symbol_list_request(7))[14:]
    sess.send(raw_frame(10, body, 13, **header))
    rej = next_named(sess, "Reject")
    want = (
        RejectReason.UNKNOWN_SCHEMA if "schema_id" in header else RejectReason.UNSUPPORTED_VERSION
    )
    assert rej.reason == want


@pytest.mark.parametrize(
    "header", [{"schema_id": 0x1234}, {"version": 0}], ids=["unknown_schema", "version_0"]
)
def test_bad_schema_or_version_reject_names_the_template(
    server: Server, header: dict[str, int]
) -> None:
    sess = logged_on(server)
    body = encode(messages.symbol_list_request(7))[14:]
    sess.send(raw_frame(10, body, 13, **header))
    assert next_named(sess, "Reject").ref_template_id == 10


def truncated_subscribe(request_id: int) -> bytes:
    """A Subscribe whose root block is whole but whose group promises 2 entries, has 1."""
    body = struct.pack("<QB", request_id, 0xFF) + struct.pack("<HH", 18, 2)
    body += struct.pack("<H16s", 0, b"")
    return raw_frame(12, body, 9)


def test_truncated_group_is_malformed(server: Server) -> None:
    sess = logged_on(server)
    sess.send(truncated_subscribe(9))
    rej = next_named(sess, "Reject")
    assert rej.reason == RejectReason.MALFORMED and rej.ref_template_id == 12
    assert sess.symbols().name == "SymbolDirectory"  # nothing accepted is lost


def test_truncated_group_reject_echoes_the_request_id(server: Server) -> None:
    sess = logged_on(server)
    sess.send(truncated_subscribe(9))
    assert next_named(sess, "Reject").request_id == 9


def test_short_root_block_is_malformed(server: Server) -> None:
    sess = logged_on(server)
    sess.send(raw_frame(12, struct.pack("<Q", 9)[:5], 5))
    rej = next_named(sess, "Reject")
    assert rej.reason == RejectReason.MALFORMED and rej.ref_template_id == 12


def test_group_entry_shorter_than_the_schema_is_malformed(server: Server) -> None:
    sess = logged_on(server)
    body = struct.pack("<QB", 8, 0xFF) + struct.pack("<HH", 10, 1) + b"\0" * 10
    sess.send(raw_frame(12, body, 9))
    rej = next_named(sess, "Reject")
    assert rej.reason == RejectReason.MALFORMED and rej.ref_template_id == 12


def test_truncated_var_data_in_logon_is_malformed(server: Server) -> None:
    sess = connect(server)
    body = struct.pack("<I", 0) + b"\x04demo\x09dem"  # token says 9 bytes, has 3
    sess.send(raw_frame(1, body, 4))
    rej = next_named(sess, "Reject", "LogonRejected")
    assert rej.name == "Reject" and rej.reason == RejectReason.MALFORMED, rej


def test_logon_with_a_bad_token_is_rejected(server: Server) -> None:
    sess = connect(server)
    sess.send(messages.logon("demo", "bad"))
    rej = next_named(sess, "LogonRejected")
    assert rej.reason == 1 and rej.reason_name == "auth"
    until_closed(sess)


def test_unknown_symbols_by_id_and_name(server: Server) -> None:
    sess = logged_on(server)
    resp = sess.subscribe([500, "ZZZZZZ", "EURUSD-but-16b!!"])
    assert [r.status for r in resp.results] == [1, 1, 1]


def test_provider_message_on_the_subscriber_port(server: Server) -> None:
    sess = logged_on(server)
    sess.send(messages.provider_quote([messages.Quote(0, 1, 2)]))
    rej = next_named(sess, "Reject")
    assert rej.reason == RejectReason.UNEXPECTED_MESSAGE
    assert rej.ref_template_id == 31


def test_server_message_sent_by_a_client(server: Server) -> None:
    sess = logged_on(server)
    sess.send(Message("PriceUpdate", {"symbolId": 0, "seq": 1}))
    rej = next_named(sess, "Reject")
    assert rej.reason == RejectReason.UNEXPECTED_MESSAGE
    assert rej.ref_template_id == 16


def burst(sess: Sess, count: int) -> threading.Thread:
    """Send ``count`` Subscribes in one write from a thread (the reader stays free)."""
    data = b"".join(encode(messages.subscribe(i + 1, [0], 0)) for i in range(count))

    def write() -> None:
        try:
            write_raw(sess, data)
        except (OSError, PricewireError):
            pass  # the server may close mid-burst; what it answered is checked

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def flooding_session(srv: Server, test: int) -> Sess:
    """A session of the account only flooding test ``test`` uses with this client API
    (server.FLOOD_ACCOUNTS: the flood-cut hold is per account and address, so a flood on
    "demo" would hold every later demo logon)."""
    account = f"flood{test}-{helpers.API}"
    sess = connect(srv)
    sess.logon(account=account, token=account)
    return sess


def read_burst_answers(sess: Sess) -> list[Incoming]:
    seen: list[Incoming] = []
    try:
        while msg := sess.recv(3.0):
            seen.append(msg)
    except PricewireError:  # the closed connection ends the read
        pass
    return seen


def test_subscribe_burst_of_10000_is_rate_limited(server: Server) -> None:
    """10,000 Subscribes in one write: the connection's message burst is served and the rest
    refused rate_limited with the §4.2 floors: the rate's one to two refills (5-10 ms at the
    default 200 per s), then the time left of the window that refusal opened (doubled for
    messages sent after the grace, at most 5 s)."""
    sess = flooding_session(server, 1)
    writer = burst(sess, 10_000)
    seen = read_burst_answers(sess)
    writer.join(5)
    oks = [m for m in seen if m.name == "SubscribeResponse"]
    rejects = [m for m in seen if isinstance(m, Reject)]
    assert oks, "nothing of the burst was served"
    assert rejects and all(r.reason == RejectReason.RATE_LIMITED for r in rejects)
    assert 5 <= rejects[0].retry_after_ms <= 10, rejects[0]  # the message rate's refill
    assert all(1 <= r.retry_after_ms <= 5_000 for r in rejects), [r.retry_after_ms for r in rejects]
    assert all(r.request_id > 0 for r in rejects)


def test_subscribe_burst_is_not_called_a_protocol_error(server: Server) -> None:
    sess = flooding_session(server, 2)
    writer = burst(sess, 10_000)
    seen = read_burst_answers(sess)
    writer.join(5)
    disc = [m for m in seen if m.name == "Disconnect"]
    assert not disc or disc[0].reason == DisconnectReason.MESSAGE_FLOOD
    assert not disc or 1_000 <= disc[0].retry_after_ms <= 5_000  # §4.2
    if disc:  # after --flood-disconnect-after (100) refusals in a row, never fewer
        before = seen[: seen.index(disc[0])]
        run = 0  # Rejects since the last Subscribe that got through (prices do not count)
        for m in before:
            if isinstance(m, Reject):
                run += 1
            elif m.name == "SubscribeResponse":
                run = 0
        assert run >= 100, run


def test_a_flood_cut_holds_the_accounts_logons_from_the_address(server: Server) -> None:
    """docs/security.md, flood-cut hold: after Disconnect(message_flood) the account's
    logons from the same address are refused rate_limited for the cut's retry-after (a try
    inside it lengthens it); another account from the address logs on at once, and the
    account itself once it has waited what it was told."""
    sess = flooding_session(server, 3)
    writer = burst(sess, 10_000)
    seen = read_burst_answers(sess)
    writer.join(5)
    cut = [m for m in seen if m.name == "Disconnect"]
    assert cut and cut[0].reason == DisconnectReason.MESSAGE_FLOOD, names(seen[-3:])
    told_s = cut[0].retry_after_ms / 1000
    with pytest.raises(LogonRefused) as early:
        flooding_session(server, 3)
    assert early.value.reason == "rate_limited", early.value
    assert 0 < early.value.retry_after <= 60, early.value  # the hold's cap
    other = logged_on(server)  # the address itself is not held
    other.logout()
    until_closed(other)
    # Honouring the refusal pays: waiting what the server said lets the account back in.
    threading.Event().wait(early.value.retry_after + 0.2)
    back = flooding_session(server, 3)
    back.logout()
    until_closed(back)
    assert told_s <= 5, told_s


def test_one_byte_every_100ms_frame_is_served(server: Server) -> None:
    sess = logged_on(server, heartbeat_ms=2000)  # dead after 6 s: longer than the dribble
    sess.heartbeat_ms = 0  # a heartbeat must not land inside the dribbled frame
    frame = encode(messages.symbol_list_request(42))  # 27 bytes over 2.7 s
    for byte in frame[:-1]:
        sess.send(bytes([byte]))
        early = sess.recv(0.1)  # paces the bytes; only the server's heartbeat may arrive
        assert early is None or early.name == "Heartbeat", early
    sess.send(frame[-1:])
    resp = next_named(sess, "SymbolDirectory", "Reject", "Disconnect")
    assert resp.name == "SymbolDirectory" and resp.request_id == 42, resp


HEAVY_SYMBOLS = list(range(16, 25))  # used by no other test: no spike filter surprises


class HeavyFeed(threading.Thread):
    """Quotes HEAVY_SYMBOLS in one batch as fast as the socket takes them (provider 2)."""

    def __init__(self, srv: Server) -> None:
        super().__init__(daemon=True)
        self.provider = ProviderSession("127.0.0.1", srv.feed_port)
        self.provider.logon(2, FEED_TOKEN)
        self.stop_event = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop_event.is_set():
            quotes = [Quote(s, 100_000 + n % 2, 100_010) for s in HEAVY_SYMBOLS]
            self.provider.quote(quotes)
            self.provider.recv(0)
            n += 1
        release(self.provider)


def test_subscriber_that_never_reads(server: Server, good_subscriber: GoodSubscriber) -> None:
    """A reader that stops is conflated, then disconnected as a slow consumer; when it
    finally reads, its stream has no PriceUpdate gap (resyncs are snapshots) and ends with
    Disconnect(slow_consumer). (A small inbox: an asyncio session stops reading as soon as
    64 messages wait, as a blocking one does at once.)"""
    sess = connect(server, rcvbuf=4096, inbox_max=64)
    sess.logon()
    for tier in (0, 1, 2):
        sess.subscribe(HEAVY_SYMBOLS, tier)
    sess.heartbeat_ms = 0
    before = server.metric("pricewire_slow_consumer_disconnects_total")
    feed = HeavyFeed(server)
    feed.start()
    try:
        assert deadline_poll(
            lambda: server.metric("pricewire_slow_consumer_disconnects_total") > before, 30
        ), "never disconnected as a slow consumer"
    finally:
        feed.stop_event.set()
        feed.join(5)
    seen = until_closed(sess, timeout_s=10)
    assert sess.tracker.gaps == []
    disc = [m for m in seen if m.name == "Disconnect"]
    assert disc and disc[-1].reason == DisconnectReason.SLOW_CONSUMER, seen[-3:]
    assert sess.tracker.accepted > 0


def test_reader_that_pauses_is_resynced_by_conflated_snapshots(
    server: Server, good_subscriber: GoodSubscriber
) -> None:
    """A reader that stops until the server conflates it, then reads again, gets a
    PriceSnapshot flagged conflated for the symbols it fell behind on, and no gap."""
    sess = connect(server, rcvbuf=4096, inbox_max=64)
    # The longest heartbeat a Logon may ask for (the server cuts it after
    # three, 90 s): a session that is not read sends no heartbeat either,
    # and on a busy host conflating can take longer than three 5-s
    # intervals, so the server would cut it as silent first.
    sess.logon(heartbeat_ms=30000)
    for tier in (0, 1, 2):
        sess.subscribe(HEAVY_SYMBOLS, tier)
    # The gauge is the server's: wait until an earlier test's connection
    # (one still closing) no longer conflates, so the one that does next is
    # this reader — a leftover had stopped the feed before this reader
    # conflated, and then no resync snapshot could come.
    assert deadline_poll(lambda: _conflating(server) == 0, 10), "another connection conflates"
    feed = HeavyFeed(server)
    feed.start()
    try:
        assert deadline_poll(lambda: _conflating(server) > 0, 10), "never conflated"
    finally:
        feed.stop_event.set()
        feed.join(5)
    # Bounded, not timed: the snapshot follows the backlog this reader
    # reads at its own pace, which on a saturated host took over 5 s.
    seen: list[str] = []

    def resync(m: object) -> bool:
        seen.append(type(m).__name__)
        return isinstance(m, Price) and m.snapshot and m.conflated

    flagged = sess.wait_for(resync, 20)
    assert flagged is not None, (
        f"no conflated resync snapshot in {len(seen)} messages "
        f"(last {seen[-5:]}; closed: {sess.closed})"
    )
    assert sess.tracker.gaps == []
    sess.close()


def _conflating(srv: Server) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in srv.http("/metrics")[1].splitlines()
        if line.startswith("pricewire_connections{") and 'state="conflating"' in line
    )
