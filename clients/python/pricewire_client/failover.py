"""Where and when to connect next, and what a terminal asked for: the state a failing-over
subscriber keeps across connections, without I/O (the sync
:class:`~pricewire_client.subscriber.Subscriber` and the asyncio
:class:`~pricewire_client.aio.Subscriber` drive it).

Rules: attempts go through the address list in order, each one to the address after the
last one used or tried; the first round after start tries every address once without
waiting; after that each attempt waits ``max(retryAfterMs, full-jitter backoff)``
(:mod:`pricewire_client.reconnect`); a final answer (bad credentials, logout) or the
policy's bound ends it (a ``closed`` event, which is always the last event).
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from . import messages
from .errors import ConnectFailed, ConnectionLost, LogonRefused, PricewireError
from .model import Disconnect, Incoming, LogonAccepted, LogonRejected, Price, Reject
from .reconnect import ReconnectPolicy, retry_floor

log = logging.getLogger("pricewire_client.subscriber")

Address = tuple[str, int]
"""(host, port) of one gateway."""

ADDRESSES_MAX = 16


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


def address_list(addresses: Sequence[Address] | str) -> list[Address]:
    """Addresses given as a list or as ``host:port,...`` text, checked for their count."""
    out = parse_addresses(addresses) if isinstance(addresses, str) else list(addresses)
    if not 0 < len(out) <= ADDRESSES_MAX:
        raise ValueError(f"1..={ADDRESSES_MAX} addresses, got {len(out)}")
    return out


class EventKind(StrEnum):
    """The kinds of :class:`Event` (a StrEnum: compares equal to its value)."""

    LOGON = "logon"
    PRICE = "price"
    MESSAGE = "message"
    DISCONNECTED = "disconnected"
    CLOSED = "closed"


@dataclass(frozen=True)
class Event:
    """One thing that happened to a subscriber.

    ``kind`` is ``logon`` (a session logged on: ``msg`` is its LogonAccepted, ``address``
    where), ``price`` (``msg`` is the :class:`~pricewire_client.model.Price` and ``status``
    the tracker's verdict: ``snapshot``, ``resumed``, ``resync``, ``ok``, ``gap`` or
    ``old``), ``message`` (any other message, e.g. a SubscribeResponse), ``disconnected``
    (a session or attempt ended: ``reason``, ``error``, the Disconnect or LogonRejected in
    ``msg`` if any, and the wait before the next attempt in ``retry_in_s``) or ``closed``
    (no more attempts: ``reason`` and ``error``; always the last event).
    """

    kind: EventKind | str
    msg: Incoming | None = None
    status: str = ""
    address: Address | None = None
    reason: str = ""
    retry_in_s: float | None = None
    error: PricewireError | None = None

    @property
    def price(self) -> Price | None:
        """The price of a ``price`` event (None for other kinds)."""
        return self.msg if isinstance(self.msg, Price) else None


Answer = Disconnect | LogonRejected | Reject | None


class Failover:
    """Addresses, retry schedule, subscriptions and pending events of one subscriber."""

    def __init__(
        self,
        addresses: Sequence[Address] | str,
        policy: ReconnectPolicy,
        rng: random.Random,
        now: float,
    ) -> None:
        self.addresses = address_list(addresses)
        self.policy, self.rng = policy, rng
        self.target = 0
        """Index of the address the next attempt uses."""
        self.retry_at = now
        self.sweep_left = len(self.addresses)
        self.closed_reason: str | None = None
        self.closed_error: PricewireError | None = None
        self.closed_by_client = False
        self.logons = 0
        self.disconnects = 0
        self.events: deque[Event] = deque()
        """Events to hand out before anything read from a session after them."""
        self.subscriptions: list[tuple[int, list[messages.SymbolRef]]] = []

    def address(self) -> Address:
        """The address of the next (or current) attempt."""
        return self.addresses[self.target]

    def due(self, now: float) -> bool:
        """Whether the next attempt may start now."""
        return self.closed_reason is None and now >= self.retry_at

    def keep(self, symbols: Sequence[messages.SymbolRef], tier: int) -> None:
        """Remember a subscription, to send again after every logon."""
        self.subscriptions.append((tier, list(symbols)))

    def drop(self, symbols: Sequence[messages.SymbolRef], tier: int) -> None:
        """Stop subscribing ``symbols`` at ``tier`` after a logon."""
        gone = set(symbols)
        kept = [
            (t, [s for s in syms if t != tier or s not in gone]) for t, syms in self.subscriptions
        ]
        self.subscriptions = [(t, syms) for t, syms in kept if syms]

    def logged_on(self, accepted: LogonAccepted, now: float) -> None:
        """A session logged on at the current address."""
        self.sweep_left = 0
        self.logons += 1
        self.policy.on_connected(now)
        addr = self.address()
        log.info("logged on at %s:%d (stream %d)", addr[0], addr[1], accepted.stream_id)
        self.events.append(Event(EventKind.LOGON, accepted, address=addr))

    def lost(self, err: PricewireError, now: float) -> None:
        """The logged-on session ended with ``err``."""
        self.disconnects += 1
        disc = err.disconnect if isinstance(err, ConnectionLost) else None
        self.failed(f"connection lost: {err}" if disc is None else str(err), disc, now, err)

    def attempt_failed(self, err: PricewireError | OSError, now: float) -> None:
        """A connect or logon attempt failed."""
        addr = self.address()
        if isinstance(err, LogonRefused):
            answer = err.answer
            self.failed(f"{answer.name}({answer.reason_name}) at {addr}", answer, now, err)
            return
        if not isinstance(err, PricewireError):
            err = ConnectFailed(f"{addr[0]}:{addr[1]}", str(err))
        why = err.why if isinstance(err, ConnectFailed) else str(err)
        self.failed(f"connect to {addr} failed: {why}", None, now, err)

    def failed(self, reason: str, answer: Answer, now: float, err: PricewireError) -> None:
        """A session or attempt ended: schedule the next attempt (next address) or close."""
        self.target = (self.target + 1) % len(self.addresses)
        retry, floor_ms = retry_floor(answer)
        delay_s: float | None
        if retry and self.sweep_left > 1:
            self.sweep_left -= 1  # the first round: every address once, without waiting
            delay_s = 0.0
        else:
            self.sweep_left = 0
            delay_s = self.policy.next_delay(now, retry, floor_ms, self.rng)
        event = Event(EventKind.DISCONNECTED, answer, reason=reason, retry_in_s=delay_s, error=err)
        self.events.append(event)
        if delay_s is None:
            why = "refused for good" if not retry else "reconnect attempts exhausted"
            self.closed_reason = f"{why}: {reason}"
            self.closed_error = err
            log.error("subscriber closed: %s", self.closed_reason)
        else:
            self.retry_at = now + delay_s
            log.warning("%s; next attempt in %.3f s", reason, delay_s)

    def close(self, reason: str = "closed by the client") -> None:
        """No more attempts (the client closed)."""
        if self.closed_reason is None:
            self.closed_reason = reason
            self.closed_by_client = True

    def closed_event(self) -> Event:
        """The ``closed`` event."""
        return Event(EventKind.CLOSED, reason=self.closed_reason or "", error=self.closed_error)

    def end_error(self) -> PricewireError | None:
        """What a price iterator raises at the end (None when the client closed)."""
        if self.closed_by_client:
            return None
        return self.closed_error or ConnectionLost(self.closed_reason or "closed")
