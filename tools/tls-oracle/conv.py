"""The conversations: each talks to one TLS port of the real binary and returns what it
saw, or raises AssertionError naming what went wrong. `raw` ones send records by hand;
the others run tlslite-ng's TLS client over a socket that decides how writes are split."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Callable

from tlslite import HandshakeSettings, TLSConnection
from tlslite.constants import AlertDescription, AlertLevel, KeyUpdateMessageType
from tlslite.extensions import TLSExtension
from tlslite.messages import Alert, ClientHello

from pricewire_client import codec, messages

import raw
from raw import Peer

# The records of the 21-byte family that follow the ClientHello piece.
TAILS = {"alert": raw.ALERT_RECORD, "ccs": raw.CCS_RECORD, "appdata": raw.APP_RECORD}


@dataclass
class Target:
    """A TLS port and what its protocol's logon looks like."""

    port: int
    kind: str  # "subscriber" or "feed"

    def logon(self) -> bytes:
        if self.kind == "feed":
            return codec.encode(messages.provider_logon(0, "demo-feed"))
        return codec.encode(messages.logon("demo", "demo", 0))

    def answered(self, name: str) -> bool:
        return name in ("LogonAccepted", "LogonRejected") if self.kind == "feed" else (
            name == "LogonAccepted"
        )


def expect(got: str, *want: str) -> str:
    assert got in want, f"server answered {got}, expected {' or '.join(want)}"
    return got


def raw_outcome(t: Target, *writes: bytes, shut: bool = False) -> str:
    """Sends each of `writes` as one write and reports the server's first answer; a
    refusal must be followed by a clean close (FIN, not a reset)."""
    p = Peer(t.port)
    try:
        for w in writes:
            p.send(w)
        if shut:
            p.sock.shutdown(socket.SHUT_WR)
        got = p.outcome()
        if got.startswith("alert:"):
            assert p.closes(), "the alert was followed by a reset"
        return got
    finally:
        p.close()


def raw_conversations() -> dict[str, Callable[[Target], str]]:
    """Conversations below the handshake: (name → run)."""
    h13, h12 = raw.client_hello("1.3"), raw.client_hello("1.2")
    unexpected = f"alert:{raw.UNEXPECTED_MESSAGE}"
    c: dict[str, Callable[[Target], str]] = {}
    for name, tail in TAILS.items():
        c[f"21-byte piece + {name}, one write"] = lambda t, tail=tail: expect(
            raw_outcome(t, raw.HELLO_PIECE + tail), unexpected
        )
        c[f"21-byte piece + {name}, two writes"] = lambda t, tail=tail: expect(
            raw_outcome(t, raw.HELLO_PIECE, tail), unexpected
        )
        c[f"real hello piece + {name}"] = lambda t, tail=tail: expect(
            raw_outcome(t, raw.record(raw.HANDSHAKE, h13[:40]) + tail), unexpected
        )
    c["hello in 1-byte records (1.3)"] = lambda t: expect(
        raw_outcome(t, raw.fragments(h13, 1)), "server_hello"
    )
    c["hello in 1-byte records (1.2)"] = lambda t: expect(
        raw_outcome(t, raw.fragments(h12, 1)), "server_hello"
    )
    c["hello in 7-byte records, one write each"] = lambda t: expect(
        raw_outcome(t, *[raw.record(raw.HANDSHAKE, h13[i : i + 7]) for i in range(0, len(h13), 7)]),
        "server_hello",
    )
    c["zero-length handshake record inside the hello"] = lambda t: expect(
        raw_outcome(t, raw.record(22, h13[:10]) + raw.record(22, b"") + raw.record(22, h13[10:])),
        unexpected,
    )
    c["zero-length handshake record first"] = lambda t: expect(
        raw_outcome(t, raw.record(22, b"") + raw.record(22, h13)), unexpected
    )
    c["zero-length application data first"] = lambda t: expect(
        raw_outcome(t, raw.record(23, b"") + raw.record(22, h13)), unexpected
    )
    c["zero-length alert first"] = lambda t: expect(
        raw_outcome(t, raw.record(21, b"") + raw.record(22, h13)), f"alert:{raw.DECODE_ERROR}"
    )
    c["CCS between hello pieces"] = lambda t: expect(
        raw_outcome(t, raw.record(22, h13[:50]) + raw.CCS_RECORD + raw.record(22, h13[50:])),
        unexpected,
    )
    c["unknown record type"] = lambda t: expect(
        raw_outcome(t, raw.record(0x18, b"\x01\x02")), unexpected
    )
    c["record longer than 2^14+2048"] = lambda t: expect(
        raw_outcome(t, b"\x16\x03\x01\x48\x01" + b"\x01" * 64), f"alert:{raw.RECORD_OVERFLOW}"
    )
    c["large hello (2^14 + 1 byte body, 2 records)"] = lambda t: expect(
        raw_outcome(t, raw.fragments(raw.padded(h13, (1 << 14) + 1), 1 << 14)), "server_hello"
    )
    c["max-size hello (2^16 - 1 byte body, 5 records)"] = lambda t: expect(
        raw_outcome(t, raw.fragments(raw.padded(h13, 0xFFFF), 1 << 14)), "server_hello"
    )
    c["oversize hello (2^16 + 4 byte body)"] = lambda t: expect(
        raw_outcome(t, raw.fragments(raw.padded(h13, 0x10004), 1 << 14)),
        f"alert:{raw.DECODE_ERROR}",
    )
    c["truncated hello, then EOF"] = lambda t: expect(
        raw_outcome(t, raw.record(22, h13[: len(h13) // 2]), shut=True), "closed"
    )
    c["hello with a short length inside"] = lambda t: expect(
        raw_outcome(t, raw.record(22, short_hello(h13))), f"alert:{raw.DECODE_ERROR}"
    )
    c["plaintext protocol on the TLS port"] = lambda t: expect(
        raw_outcome(t, t.logon()), unexpected, f"alert:{raw.DECODE_ERROR}"
    )
    return c


def short_hello(hello: bytes) -> bytes:
    """`hello` cut by 20 bytes with its message length saying so: its lists overrun it."""
    body = hello[4:-20]
    return hello[:1] + len(body).to_bytes(3, "big") + body


class SplitSocket:
    """A socket under tlslite: holds back every write after the server's first flight
    arrived (the client's Finished, and whatever the test writes next) until `flush`, so
    they reach the server as one write; `split` cuts every write into pieces that size."""

    def __init__(self, port: int, hold: bool = False, split: int = 0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.hold_after_read, self.holding, self.held = hold, False, bytearray()
        self.split = split

    def send(self, data: bytes) -> int:
        self.sendall(data)
        return len(data)

    def sendall(self, data: bytes) -> None:
        if self.holding:
            self.held += data
        elif self.split:
            for i in range(0, len(data), self.split):
                self.sock.sendall(data[i : i + self.split])
        else:
            self.sock.sendall(data)

    def recv(self, n: int) -> bytes:
        data = self.sock.recv(n)
        if self.hold_after_read:
            self.hold_after_read, self.holding = False, True
        return data

    def flush(self) -> None:
        self.holding = False
        data, self.held = bytes(self.held), bytearray()
        self.sock.sendall(data)

    def __getattr__(self, name: str):
        return getattr(self.sock, name)


def settings(version: str) -> HandshakeSettings:
    s = HandshakeSettings()
    if version == "1.2":
        s.maxVersion = (3, 3)
    return s


def read_frames(conn: TLSConnection, n: int) -> list[str]:
    """The names of the next `n` frames from the server (every record decrypted)."""
    buf, names = b"", []
    while len(names) < n:
        size = codec.check_sofh(buf, 1 << 16)
        if size is not None and len(buf) >= size:
            names.append(codec.decode(buf[:size]).name)
            buf = buf[size:]
            continue
        data = conn.recv(1 << 16)
        assert data, f"server closed after {names}"
        buf += data
    return names


def logged_on(t: Target, conn: TLSConnection, sent: bool = False) -> None:
    """Logs on (unless the logon went already) and, on the subscriber port, subscribes
    and decrypts 20 more frames (prices, each its own record)."""
    if not sent:
        conn.write(t.logon())
    first = read_frames(conn, 1)[0]
    assert t.answered(first), f"logon answered {first}"
    if t.kind == "subscriber":
        conn.write(codec.encode(messages.subscribe(1, [0, 1, 2])))
        names = read_frames(conn, 20)
        assert "PriceUpdate" in names or "PriceSnapshot" in names, names


def close_answered(conn: TLSConnection) -> None:
    """Our close_notify is answered with the server's before it closes."""
    for _ in conn._sendMsg(Alert().create(AlertDescription.close_notify, AlertLevel.warning)):
        pass
    try:
        while conn.read(max=1 << 16):
            pass
    except Exception as err:  # tlslite names a close without close_notify
        raise AssertionError(f"no close_notify back: {err!r}") from err
    assert conn.closed, "server's close_notify not seen"


def handshake(t: Target, version: str, record_size: int = 0, split: int = 0, session=None):
    sock = SplitSocket(t.port, split=split)
    conn = TLSConnection(sock)
    if record_size:
        conn.recordSize = record_size
    conn.handshakeClientCert(settings=settings(version), session=session, serverName="localhost")
    return conn


def fragmented(t: Target, version: str) -> str:
    conn = handshake(t, version, record_size=1, split=3)
    logged_on(t, conn)
    # An alert is never fragmented (RFC 8446 §5.1): whole records again.
    conn.recordSize = 1 << 14
    close_answered(conn)
    return "ok"


def keyupdate_with_finished(t: Target, kind: int | None, logon_too: bool) -> str:
    """Finished [+ KeyUpdate(kind)] [+ Logon] in one write."""
    sock = SplitSocket(t.port, hold=True)
    conn = TLSConnection(sock)
    conn.handshakeClientCert(settings=settings("1.3"), serverName="localhost")
    if kind is not None:
        for _ in conn.send_keyupdate_request(kind):
            pass
    if logon_too:
        conn.write(t.logon())
    sock.flush()
    logged_on(t, conn, sent=logon_too)
    assert conn.tickets, "no NewSessionTicket"
    close_answered(conn)
    return f"{len(conn.tickets)} tickets"


def resumed(t: Target, version: str) -> str:
    first = handshake(t, version)
    logged_on(t, first)
    session = first.session
    if version == "1.3":
        assert first.tickets, "no NewSessionTicket to resume with"
        session.tickets = list(first.tickets)
    close_answered(first)
    again = handshake(t, version, session=session)
    assert again.resumed, "the server did not resume the session"
    logged_on(t, again)
    close_answered(again)
    return "resumed"


def keyupdate_later(t: Target) -> str:
    conn = handshake(t, "1.3")
    logged_on(t, conn)
    for _ in range(3):
        for _ in conn.send_keyupdate_request(KeyUpdateMessageType.update_requested):
            pass
    conn.write(codec.encode(messages.heartbeat()))
    read_frames(conn, 5 if t.kind == "subscriber" else 0)
    close_answered(conn)
    return "ok"


def client_alert(t: Target, desc: int, level: int) -> str:
    """A fatal alert ends the session (the server closes); user_canceled carries on."""
    conn = handshake(t, "1.3")
    logged_on(t, conn)
    for _ in conn._sendMsg(Alert().create(desc, level)):
        pass
    if desc == AlertDescription.user_canceled:
        conn.write(codec.encode(messages.heartbeat()))
        read_frames(conn, 3 if t.kind == "subscriber" else 0)
        close_answered(conn)
        return "carried on"
    sock = conn.sock
    sock.settimeout(5)
    while True:
        try:
            data = sock.recv(1 << 16)
        except ConnectionResetError:
            return "reset"
        if not data:
            return "closed"


def early_data_offered(t: Target) -> str:
    """A resumption offering 0-RTT data the server does not take: its early records are
    skipped and the handshake completes."""
    first = handshake(t, "1.3")
    logged_on(t, first)
    session = first.session
    session.tickets = list(first.tickets)
    close_answered(first)
    orig = ClientHello.create

    def with_early_data(self, *a, **kw):
        out = orig(self, *a, **kw)
        ext = TLSExtension(extType=42).create(bytearray())
        self.extensions = [ext] + list(self.extensions or [])
        return out

    sock = SplitSocket(t.port)
    first_send = sock.sendall

    def send_hello_then_early(data: bytes) -> None:
        sock.sendall = first_send
        first_send(data + raw.record(raw.APP_DATA, raw.junk(48)) * 2)

    sock.sendall = send_hello_then_early
    ClientHello.create = with_early_data
    try:
        conn = TLSConnection(sock)
        conn.handshakeClientCert(settings=settings("1.3"), session=session, serverName="localhost")
    finally:
        ClientHello.create = orig
    logged_on(t, conn)
    close_answered(conn)
    return "resumed" if conn.resumed else "full handshake"


def tls_conversations() -> dict[str, Callable[[Target], str]]:
    ku = KeyUpdateMessageType
    c: dict[str, Callable[[Target], str]] = {
        "1-byte handshake records, 3-byte writes (1.3)": lambda t: fragmented(t, "1.3"),
        "1-byte handshake records, 3-byte writes (1.2)": lambda t: fragmented(t, "1.2"),
        "Finished + Logon in one write": lambda t: keyupdate_with_finished(t, None, True),
        "Finished, then Logon": lambda t: keyupdate_with_finished(t, None, False),
        "resumption (1.3 ticket)": lambda t: resumed(t, "1.3"),
        "resumption (1.2 session id)": lambda t: resumed(t, "1.2"),
        "3 KeyUpdates (update_requested) mid-session": keyupdate_later,
        "fatal alert from the client": lambda t: client_alert(
            t, AlertDescription.internal_error, AlertLevel.fatal
        ),
        "user_canceled from the client": lambda t: client_alert(
            t, AlertDescription.user_canceled, AlertLevel.warning
        ),
        "early data offered": early_data_offered,
    }
    for kind, label in ((ku.update_requested, "requested"), (ku.update_not_requested, "not")):
        for logon in (True, False):
            name = f"Finished + KeyUpdate({label}){' + Logon' if logon else ''} in one write"
            c[name] = lambda t, kind=kind, logon=logon: keyupdate_with_finished(t, kind, logon)
    return c
