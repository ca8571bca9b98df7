"""Subscriber and provider sessions over TCP, and the sequence tracker they use.

:class:`SeqTracker` is pure (no socket, no clock): it applies the rules of protocol.md §5 to
each price and says whether it was accepted, old, or a gap. :class:`Connection` owns one
socket and a :class:`~pricewire_client.codec.FrameReader`; every wait is bounded by a
deadline, and while waiting it sends Heartbeat whenever nothing was sent for the heartbeat
interval. :class:`Session` adds logon, requests with fresh request ids and budgets, and
resync by a critical SnapshotRequest on a gap. :class:`ProviderSession` is the ingest side.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Sequence

from . import messages, schema
from .codec import FrameReader, Message, decode, encode
from .tracker import SeqTracker


class ConnectionClosed(Exception):
    """The peer closed the connection (EOF or reset)."""


class LogonRefused(Exception):
    """The server answered the logon with LogonRejected or Disconnect."""

    def __init__(self, answer: Message) -> None:
        super().__init__(f"logon refused: {answer.name} {answer.fields} {answer.text('text')!r}")
        self.answer = answer


class Connection:
    """One framed TCP connection with bounded waits and idle heartbeats.

    With ``tls`` (an :class:`ssl.SSLContext`, e.g. ``ssl.create_default_context(cafile=...)``)
    the connection speaks TLS; the handshake runs in the constructor within ``timeout_s`` and
    checks the server's certificate against ``server_hostname`` (default: ``host``).
    ``clock`` (seconds, monotonic) times deadlines, heartbeats and ``last_received``.
    """

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float = 5.0,
        rcvbuf: int | None = None,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connect, so the window is negotiated with it
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout_s)
        self.sock.connect((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=server_hostname or host)
        self.reader = FrameReader()
        self.heartbeat_ms = 0
        self.last_sent = self.clock()
        self.last_received = self.clock()
        self.closed = False

    def send(self, msg: Message | bytes) -> None:
        """Send one message (or raw bytes, for tests)."""
        self.sock.sendall(encode(msg) if isinstance(msg, Message) else msg)
        self.last_sent = self.clock()

    def _heartbeat_if_idle(self) -> None:
        if self.heartbeat_ms and self.clock() - self.last_sent >= self.heartbeat_ms / 1000:
            self.send(messages.heartbeat())

    def _read_some(self, deadline: float) -> bool:
        wait = deadline - self.clock()
        if self.heartbeat_ms:
            wait = min(wait, self.heartbeat_ms / 2000)
        self.sock.settimeout(max(wait, 0.001))
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return False
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError) as err:
            self.closed = True
            raise ConnectionClosed(str(err)) from err
        if not data:
            self.closed = True
            raise ConnectionClosed("EOF")
        self.reader.feed(data)
        self.last_received = self.clock()
        return True

    def recv_raw(self, timeout_s: float) -> bytes | None:
        """The next frame's bytes, or None when ``timeout_s`` passes first."""
        deadline = self.clock() + timeout_s
        while True:
            frame = self.reader.next_frame()
            if frame is not None:
                return frame
            if self.closed:
                raise ConnectionClosed("EOF")
            self._heartbeat_if_idle()
            if self.clock() >= deadline:
                return None
            self._read_some(deadline)

    def recv(self, timeout_s: float) -> Message | None:
        """The next message, or None when ``timeout_s`` passes first."""
        frame = self.recv_raw(timeout_s)
        if frame is None:
            return None
        msg = decode(frame)
        self.on_message(msg)
        return msg

    def on_message(self, msg: Message) -> None:
        """Hook called for every received message (the subscriber session tracks prices)."""

    def wait_for(self, pred: Callable[[Message], bool], timeout_s: float) -> Message | None:
        """The first received message matching ``pred`` within ``timeout_s``, else None.

        Messages that do not match are still passed to :meth:`on_message`, then dropped.
        """
        deadline = self.clock() + timeout_s
        while (left := deadline - self.clock()) > 0:
            msg = self.recv(left)
            if msg is not None and pred(msg):
                return msg
        return None

    def wait_closed(self, timeout_s: float) -> list[Message]:
        """Read until the server closes; the messages received meanwhile.

        Raises TimeoutError if the connection is still open after ``timeout_s``.
        """
        seen: list[Message] = []
        deadline = self.clock() + timeout_s
        try:
            while (left := deadline - self.clock()) > 0:
                msg = self.recv(left)
                if msg is not None:
                    seen.append(msg)
        except ConnectionClosed:
            return seen
        raise TimeoutError(f"still open after {timeout_s} s; received {[m.name for m in seen]}")

    def close(self) -> None:
        """Close the socket (idempotent)."""
        self.closed = True
        self.sock.close()


class Session(Connection):
    """A subscriber session: logon, requests, subscriptions with sequence checking."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float = 5.0,
        rcvbuf: int | None = None,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        tracker: SeqTracker | None = None,
    ) -> None:
        super().__init__(host, port, timeout_s, rcvbuf, tls, server_hostname, clock)
        self.tracker = tracker if tracker is not None else SeqTracker()
        self.last_status = ""
        self.next_request_id = 1
        self.resync_ids: set[int] = set()
        self.prices: dict[tuple[int, int], Message] = {}
        self.accepted: Message | None = None

    def request_id(self) -> int:
        """A fresh request id."""
        rid = self.next_request_id
        self.next_request_id += 1
        return rid

    def logon(
        self,
        account: str = "demo",
        token: str = "demo",
        heartbeat_ms: int = 0,
        timeout_s: float = 5.0,
    ) -> Message:
        """Log on; the LogonAccepted, or :class:`LogonRefused`."""
        self.send(messages.logon(account, token, heartbeat_ms))
        answer = self.wait_for(
            lambda m: m.name in ("LogonAccepted", "LogonRejected", "Disconnect"), timeout_s
        )
        if answer is None:
            raise TimeoutError("no answer to Logon")
        if answer.name != "LogonAccepted":
            raise LogonRefused(answer)
        self.heartbeat_ms = answer.int("heartbeatIntervalMs")
        self.accepted = answer
        return answer

    def on_message(self, msg: Message) -> None:
        """Track prices; on a gap, ask for a critical snapshot to resync."""
        if msg.name in ("PriceSnapshot", "PriceUpdate"):
            self.prices[(msg.int("symbolId"), msg.int("tier"))] = msg
            self.last_status = self.tracker.apply(msg)
            if self.last_status == "gap":
                self.resync(msg.int("symbolId"), msg.int("tier"))
        elif msg.name == "SnapshotResponse" and msg.int("requestId") in self.resync_ids:
            self.resync_ids.discard(msg.int("requestId"))
            for entry in msg.groups["prices"]:
                self.tracker.apply_snapshot_entry(entry)

    def resync(self, symbol_id: int, tier: int) -> None:
        """Send a critical SnapshotRequest for one (symbol, tier)."""
        rid = self.request_id()
        self.resync_ids.add(rid)
        self.send(messages.snapshot_request(rid, [symbol_id], tier, critical=True))

    def request(self, build: Callable[[int], Message], timeout_s: float = 5.0) -> Message:
        """Send a request built for a fresh id; its answer (response or Reject)."""
        rid = self.request_id()
        self.send(build(rid))
        answer = self.wait_for(
            lambda m: (
                m.name != "PriceUpdate"
                and m.name != "PriceSnapshot"
                and m.get("requestId", -1) == rid
                or m.name == "Disconnect"
            ),
            timeout_s,
        )
        if answer is None:
            raise TimeoutError(f"no answer to request {rid}")
        return answer

    def symbols(self, budget_us: int = 0) -> Message:
        """SymbolListRequest; the SymbolDirectory (or Reject)."""
        return self.request(lambda rid: messages.symbol_list_request(rid, budget_us))

    def subscribe(
        self, symbols: Sequence[messages.SymbolRef], tier: int = schema.DEFAULT_TIER
    ) -> Message:
        """Subscribe; the SubscribeResponse (or Reject)."""
        return self.request(lambda rid: messages.subscribe(rid, symbols, tier))

    def unsubscribe(
        self, symbols: Sequence[messages.SymbolRef], tier: int = schema.DEFAULT_TIER
    ) -> Message:
        """Unsubscribe; the SubscribeResponse (or Reject)."""
        return self.request(lambda rid: messages.unsubscribe(rid, symbols, tier))

    def snapshot(
        self,
        symbols: Sequence[int],
        tier: int = schema.DEFAULT_TIER,
        budget_us: int = 0,
        critical: bool = False,
    ) -> Message:
        """SnapshotRequest; the SnapshotResponse (or Reject)."""
        return self.request(
            lambda rid: messages.snapshot_request(rid, symbols, tier, budget_us, critical)
        )

    def history(self, symbol_id: int, count: int, budget_us: int = 0) -> Message:
        """HistoryRequest; the HistoryResponse (or Reject)."""
        return self.request(lambda rid: messages.history_request(rid, symbol_id, count, budget_us))

    def logout(self, timeout_s: float = 5.0) -> Message | None:
        """Logout; the Disconnect(logout) the server answers with (None if it just closed)."""
        self.send(messages.logout())
        try:
            return self.wait_for(lambda m: m.name == "Disconnect", timeout_s)
        except ConnectionClosed:
            return None


class ProviderSession(Connection):
    """A provider ingest session: ProviderLogon, then ProviderQuote batches."""

    def logon(self, provider_id: int, token: str, timeout_s: float = 5.0) -> Message:
        """ProviderLogon; the LogonAccepted, or :class:`LogonRefused`."""
        self.send(messages.provider_logon(provider_id, token))
        answer = self.wait_for(
            lambda m: m.name in ("LogonAccepted", "LogonRejected", "Disconnect"), timeout_s
        )
        if answer is None:
            raise TimeoutError("no answer to ProviderLogon")
        if answer.name != "LogonAccepted":
            raise LogonRefused(answer)
        self.heartbeat_ms = answer.int("heartbeatIntervalMs")
        return answer

    def quote(self, quotes: list[messages.Quote]) -> None:
        """Send one ProviderQuote batch."""
        self.send(messages.provider_quote(quotes))
