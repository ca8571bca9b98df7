"""Raw TLS records for conversations a conforming client would never have: a ClientHello
taken from tlslite-ng (so its key shares and lists are real) and then cut, padded,
truncated or interleaved by hand, and a reader of what the server sends back."""

from __future__ import annotations

import os
import socket
import struct
import time

from tlslite import HandshakeSettings, TLSConnection

HANDSHAKE, ALERT, CCS, APP_DATA = 22, 21, 20, 23
CLIENT_HELLO, SERVER_HELLO = 1, 2
UNEXPECTED_MESSAGE, DECODE_ERROR, RECORD_OVERFLOW = 10, 50, 22

# The record family that used to stop the service: the first 14 bytes of a ClientHello as
# one record, then a record that ends the handshake before that message is whole.
HELLO_PIECE = bytes.fromhex("16030100090100 00c8 0303aabbcc".replace(" ", ""))
ALERT_RECORD = bytes.fromhex("15030100020228")
CCS_RECORD = bytes.fromhex("140301000101")
APP_RECORD = bytes.fromhex("1703030005") + b"\x00" * 5


def record(typ: int, body: bytes, version: bytes = b"\x03\x03") -> bytes:
    """One record around `body`."""
    return bytes([typ]) + version + struct.pack(">H", len(body)) + body


class _Capture:
    """A socket that keeps what is sent and fails the first read: tlslite's first flight."""

    def __init__(self) -> None:
        self.sent = bytearray()

    def send(self, data: bytes) -> int:
        self.sent += data
        return len(data)

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def recv(self, _n: int) -> bytes:
        raise OSError("capture only")

    def settimeout(self, _t: float | None) -> None:
        pass

    def close(self) -> None:
        pass

    def shutdown(self, _how: int) -> None:
        pass


def client_hello(versions: str = "1.3") -> bytes:
    """The handshake message (header and body) of a real tlslite-ng ClientHello."""
    settings = HandshakeSettings()
    if versions == "1.2":
        settings.maxVersion = (3, 3)
    cap = _Capture()
    try:
        TLSConnection(cap).handshakeClientCert(settings=settings, serverName="localhost")
    except Exception:
        pass
    raw = bytes(cap.sent)
    assert raw[0] == HANDSHAKE, raw[:8].hex()
    length = struct.unpack(">H", raw[3:5])[0]
    return raw[5 : 5 + length]


def padded(hello: bytes, body_len: int) -> bytes:
    """`hello` with an extension of an unassigned type (servers ignore those) that makes
    its body `body_len` bytes."""
    body = hello[4:]
    at = 2 + 32
    at += 1 + body[at]  # session id
    at += 2 + struct.unpack(">H", body[at : at + 2])[0]  # cipher suites
    at += 1 + body[at]  # compression methods
    ext_len = struct.unpack(">H", body[at : at + 2])[0]
    pad = body_len - len(body) - 4
    assert pad >= 0, f"hello already {len(body)} bytes"
    exts = body[at + 2 : at + 2 + ext_len] + struct.pack(">HH", 0x7F7F, pad) + b"\x00" * pad
    new = body[:at] + struct.pack(">H", len(exts)) + exts
    return bytes([CLIENT_HELLO]) + len(new).to_bytes(3, "big") + new


def fragments(message: bytes, size: int, typ: int = HANDSHAKE) -> bytes:
    """`message` as records of at most `size` bytes."""
    return b"".join(record(typ, message[i : i + size]) for i in range(0, len(message), size))


class Peer:
    """One raw TCP conversation with the server."""

    def __init__(self, port: int, timeout_s: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.reset = False
        self.deadline = time.monotonic() + timeout_s

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer from the server")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            self.reset, data = True, b""
        self.buf += data
        return bool(data)

    def next_record(self) -> tuple[int, bytes] | None:
        """The next whole record, or None when the server closed first."""
        while len(self.buf) < 5 or len(self.buf) < 5 + struct.unpack(">H", self.buf[3:5])[0]:
            if not self._fill():
                return None
        n = 5 + struct.unpack(">H", self.buf[3:5])[0]
        rec, self.buf = self.buf[:n], self.buf[n:]
        return rec[0], rec[5:]

    def outcome(self) -> str:
        """What the server answered: 'server_hello', 'alert:N' (a plaintext fatal alert),
        'encrypted' (a record we cannot read) or 'closed'."""
        rec = self.next_record()
        if rec is None:
            return "closed"
        typ, body = rec
        if typ == HANDSHAKE and body[:1] == bytes([SERVER_HELLO]):
            return "server_hello"
        if typ == ALERT and len(body) == 2:
            return f"alert:{body[1]}"
        return "encrypted" if typ == APP_DATA else f"record:{typ}"

    def closes(self) -> bool:
        """Whether the server closes (FIN, no reset) after what it sent."""
        while self.next_record() is not None:
            pass
        return not self.reset

    def close(self) -> None:
        self.sock.close()


def junk(n: int) -> bytes:
    return os.urandom(n)
