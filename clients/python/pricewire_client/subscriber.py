"""A subscriber that survives its server: reconnects over a list of addresses and resumes
by sequence.

:class:`Subscriber` keeps what a terminal asked for (the subscriptions) and one
:class:`~pricewire_client.session.SeqTracker` across connections. When a session ends (the
connection closes, the server sends Disconnect, or nothing arrives for
``dead_after_heartbeats`` heartbeat intervals, protocol.md §4.1) it waits
``max(retryAfterMs, full-jitter backoff)`` (:mod:`pricewire_client.reconnect`), connects to
the **next** address of its list, logs on again and subscribes again. The first snapshot of
each (symbol, tier) on the new session is judged by sequence (protocol.md §5): ``resumed``
when no price was missed (the edges of one core send the core's sequence numbers), a
``resync`` only on a real gap. The first round of connects tries each address once, in
order, without waiting. Reconnects are bounded by the policy's attempts or deadline; a
final answer (bad credentials, logout) ends the subscriber.

Time (``clock``, ``sleep``), randomness (``rng``) and the connection itself (``connect``)
are injectable, so tests can drive every decision without a server.
"""

from __future__ import annotations

import random
import ssl
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from . import messages, schema
from .codec import CodecError, FramingError, Message
from .reconnect import ReconnectPolicy, retry_floor, system_rng
from .session import ConnectionClosed, LogonRefused, Session
from .tracker import SeqTracker

Address = tuple[str, int]
"""(host, port) of one gateway."""

ADDRESSES_MAX = 16
DEAD_AFTER_HEARTBEATS = 3


def parse_addresses(text: str, default_host: str = "127.0.0.1") -> list[Address]:
    """``host:port[,host:port...]`` (a bare ``port`` means ``default_host``) as addresses.

    Raises ValueError on an empty list, a bad port, or more than ``ADDRESSES_MAX``.
    """
    out: list[Address] = []
    for part in text.split(","):
        part = part.strip()
        host, sep, port = part.rpartition(":")
        if not sep:
            host, port = default_host, part
        host = host.strip("[]") or default_host
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad address {part!r}: want host:port")
        out.append((host, int(port)))
    if len(out) > ADDRESSES_MAX:
        raise ValueError(f"at most {ADDRESSES_MAX} addresses, got {len(out)}")
    return out


@dataclass(frozen=True)
class Event:
    """One thing that happened to a :class:`Subscriber`.

    ``kind`` is ``logon`` (a session logged on: ``msg`` is its LogonAccepted, ``address``
    where), ``price`` (``msg`` is a PriceSnapshot or PriceUpdate and ``status`` the
    tracker's verdict: ``snapshot``, ``resumed``, ``resync``, ``ok``, ``gap`` or ``old``),
    ``message`` (any other message, e.g. a SubscribeResponse), ``disconnected`` (a session
    or attempt ended: ``reason``, the Disconnect or LogonRejected in ``msg`` if any, and the
    wait before the next attempt in ``retry_in_s``) or ``closed`` (no more attempts:
    ``reason``).
    """

    kind: str
    msg: Message | None = None
    status: str = ""
    address: Address | None = None
    reason: str = ""
    retry_in_s: float | None = None


class Subscriber:
    """A reconnecting, failing-over subscriber over ``addresses`` (tried in order)."""

    def __init__(
        self,
        addresses: Sequence[Address],
        account: str = "demo",
        token: str = "demo",
        heartbeat_ms: int = 0,
        *,
        policy: ReconnectPolicy | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        connect: Callable[[Address], Session] | None = None,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        timeout_s: float = 5.0,
        dead_after_heartbeats: int = DEAD_AFTER_HEARTBEATS,
    ) -> None:
        if not 0 < len(addresses) <= ADDRESSES_MAX:
            raise ValueError(f"1..={ADDRESSES_MAX} addresses, got {len(addresses)}")
        self.addresses = list(addresses)
        self.account, self.token, self.heartbeat_ms = account, token, heartbeat_ms
        self.policy = policy or ReconnectPolicy()
        self.rng = rng or system_rng()
        self.clock, self.sleep = clock, sleep
        self.tls, self.server_hostname, self.timeout_s = tls, server_hostname, timeout_s
        self._connect = connect or self._open_session
        self.dead_after_heartbeats = dead_after_heartbeats
        self.tracker = SeqTracker()
        self.prices: dict[tuple[int, int], Message] = {}
        """The last price received per (symbol, tier), over every session."""
        self.subscriptions: list[tuple[int, list[messages.SymbolRef]]] = []
        self.session: Session | None = None
        self.target = 0
        """Index of the address the next attempt uses."""
        self.retry_at = clock()
        self.sweep_left = len(self.addresses)
        self.closed_reason: str | None = None
        self.logons = 0
        self.disconnects = 0
        self.skipped_frames = 0
        """Frames skipped whole: an unknown template or a malformed body."""
        self.pending: deque[Event] = deque()

    # ---- what the terminal asks for ---------------------------------------------------

    def subscribe(
        self, symbols: Sequence[messages.SymbolRef], tier: int = schema.DEFAULT_TIER
    ) -> int | None:
        """Subscribe now if connected, and again after every reconnect.

        The request id the SubscribeResponse (a ``message`` event) will carry, or None when
        not connected (the subscription goes out with the next logon).
        """
        self.subscriptions.append((tier, list(symbols)))
        return self._send_request(lambda rid: messages.subscribe(rid, symbols, tier))

    def unsubscribe(
        self, symbols: Sequence[messages.SymbolRef], tier: int = schema.DEFAULT_TIER
    ) -> int | None:
        """Unsubscribe now if connected, and stop subscribing these after a reconnect."""
        gone = set(symbols)
        kept = [(t, [s for s in syms if t != tier or s not in gone]) for t, syms in self.subs()]
        self.subscriptions = [(t, syms) for t, syms in kept if syms]
        return self._send_request(lambda rid: messages.unsubscribe(rid, symbols, tier))

    def subs(self) -> list[tuple[int, list[messages.SymbolRef]]]:
        """The subscriptions sent again after a reconnect: (tier, symbols) in order."""
        return list(self.subscriptions)

    @property
    def connected(self) -> bool:
        """True while a session is logged on."""
        return self.session is not None

    @property
    def closed(self) -> bool:
        """True once the subscriber gave up or was closed; ``closed_reason`` says why."""
        return self.closed_reason is not None

    def close(self, timeout_s: float = 2.0) -> None:
        """Log out (if connected) and stop reconnecting."""
        if self.session is not None:
            try:
                self.session.logout(timeout_s)
            except (OSError, ConnectionClosed, CodecError):
                pass  # closing anyway
            self.session.close()
            self.session = None
        self.closed_reason = self.closed_reason or "closed by the client"

    # ---- the loop ---------------------------------------------------------------------

    def next_event(self, timeout_s: float) -> Event | None:
        """The next event within ``timeout_s`` (None if none), reconnecting as needed.

        While disconnected it waits (``sleep``) for the next attempt, never past
        ``timeout_s``. Once closed, every call returns a ``closed`` event.
        """
        deadline = self.clock() + timeout_s
        while True:
            if self.pending:
                return self.pending.popleft()
            if self.closed_reason is not None:
                return Event("closed", reason=self.closed_reason)
            now = self.clock()
            if self.session is None:
                if now >= self.retry_at:
                    self._attempt(now)
                    continue
                if now >= deadline:
                    return None
                self.sleep(min(self.retry_at, deadline) - now)  # the backoff, not a sync
                continue
            event = self._read(self.session, now, deadline)
            if event is not None:
                return event
            if self.session is not None and self.clock() >= deadline:
                return None

    def _read(self, sess: Session, now: float, deadline: float) -> Event | None:
        """One bounded read of the current session: an event, or None (nothing yet)."""
        dead_after_s = self.dead_after_heartbeats * max(sess.heartbeat_ms, 100) / 1000
        until_dead = sess.last_received + dead_after_s - now
        try:
            msg = sess.recv(max(min(deadline - now, until_dead), 0.001))
        except (ConnectionClosed, OSError, FramingError) as err:
            self._lost(f"connection lost: {err}", None)
            return None
        except CodecError:
            self.skipped_frames += 1  # a whole frame this client cannot read: skip it
            return None
        if msg is None:
            silent = self.clock() - sess.last_received
            if silent > dead_after_s:
                self._lost(f"dead peer: nothing received for {silent:.1f} s", None)
            return None
        if msg.name in ("PriceSnapshot", "PriceUpdate"):
            self.prices[(msg.int("symbolId"), msg.int("tier"))] = msg
            return Event("price", msg, status=sess.last_status, address=self._address())
        if msg.name == "Disconnect":
            self._lost(f"Disconnect({self._reason(msg)}) {msg.text('text')!r}", msg)
            return None
        return Event("message", msg, address=self._address())

    def _address(self) -> Address:
        return self.addresses[self.target]

    @staticmethod
    def _reason(msg: Message) -> str:
        enum = schema.DisconnectReason if msg.name == "Disconnect" else schema.LogonRejectReason
        try:
            return enum(msg.int("reason")).name.lower()
        except ValueError:
            return str(msg.int("reason"))

    def _open_session(self, addr: Address) -> Session:
        return Session(
            addr[0],
            addr[1],
            self.timeout_s,
            tls=self.tls,
            server_hostname=self.server_hostname,
            clock=self.clock,
            tracker=self.tracker,
        )

    def _attempt(self, now: float) -> None:
        """Connect to the current address, log on and subscribe again."""
        addr = self._address()
        self.tracker.resume()
        sess: Session | None = None
        try:
            sess = self._connect(addr)
            sess.tracker = self.tracker
            accepted = sess.logon(self.account, self.token, self.heartbeat_ms, self.timeout_s)
        except LogonRefused as err:
            if sess is not None:
                sess.close()
            refused = err.answer
            self._failed(f"{refused.name}({self._reason(refused)}) at {addr}", refused)
            return
        except (ConnectionClosed, OSError, TimeoutError, CodecError) as err:
            if sess is not None:
                sess.close()
            self._failed(f"connect to {addr} failed: {err}", None)
            return
        self.session = sess
        self.sweep_left = 0
        self.logons += 1
        self.policy.on_connected(now)
        self.pending.append(Event("logon", accepted, address=addr))
        for tier, symbols in self.subscriptions:
            if self._send_request(partial(messages.subscribe, symbols=symbols, tier=tier)) is None:
                return  # the send failed: the session is already lost

    def _send_request(self, build: Callable[[int], Message]) -> int | None:
        sess = self.session
        if sess is None:
            return None
        rid = sess.request_id()
        try:
            sess.send(build(rid))
        except OSError as err:
            self._lost(f"connection lost: {err}", None)
            return None
        return rid

    def _lost(self, reason: str, answer: Message | None) -> None:
        """The logged-on session ended."""
        if self.session is not None:
            self.session.close()
            self.session = None
            self.disconnects += 1
        self._failed(reason, answer)

    def _failed(self, reason: str, answer: Message | None) -> None:
        """A session or attempt ended: schedule the next attempt (next address) or close."""
        now = self.clock()
        self.target = (self.target + 1) % len(self.addresses)
        retry, floor_ms = retry_floor(answer)
        delay_s: float | None
        if retry and self.sweep_left > 1:
            self.sweep_left -= 1  # the first round: every address once, without waiting
            delay_s = 0.0
        else:
            self.sweep_left = 0
            delay_s = self.policy.next_delay(now, retry, floor_ms, self.rng)
        self.pending.append(Event("disconnected", answer, reason=reason, retry_in_s=delay_s))
        if delay_s is None:
            why = "refused for good" if not retry else "reconnect attempts exhausted"
            self.closed_reason = f"{why}: {reason}"
        else:
            self.retry_at = now + delay_s
