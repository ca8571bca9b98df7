"""When to reconnect: full-jitter exponential backoff and a bounded retry policy.

Pure (no socket, no clock of its own): callers pass the time and a :class:`random.Random`,
so tests check every delay without sleeping. A delay is ``max(retryAfterMs, uniform(0,
min(cap, base * 2**attempt)))`` (protocol.md §4.2, full jitter): never a fixed schedule, so
terminals dropped at the same instant spread out, and the server's ``retryAfterMs`` is a
floor. The backoff window grows with every failure and shrinks back to ``base_ms`` only
once a session stayed up for ``stable_after_s``, so a server that accepts and drops at once
still sees the backoff grow.

Giving up is bounded per outage, and an outage starts when a session is lost (or with the
first failed attempt): ``attempts_max`` failed attempts in a row since the last logon, and
optionally ``give_up_after_s`` seconds since the outage started. After a lost session at
least one attempt is always made (unless the answer was final, or ``attempts_max`` is 0),
however long the previous outage was and however short the session in between.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

from . import schema
from .model import Disconnect, LogonRejected, Reject

BACKOFF_BASE_MS = 100
BACKOFF_CAP_MS = 10_000
ATTEMPTS_MAX = 10_000
STABLE_AFTER_S = 10.0


def system_rng() -> random.Random:
    """A generator seeded from ``os.urandom``: every process draws different delays."""
    return random.Random(int.from_bytes(os.urandom(16), "big"))


@dataclass(frozen=True)
class Backoff:
    """Full-jitter exponential backoff: the window doubles from ``base_ms`` up to ``cap_ms``."""

    base_ms: int = BACKOFF_BASE_MS
    cap_ms: int = BACKOFF_CAP_MS

    def __post_init__(self) -> None:
        if not 0 < self.base_ms <= self.cap_ms:
            raise ValueError(f"backoff needs 0 < base_ms <= cap_ms, got {self}")

    def window_ms(self, attempt: int) -> int:
        """The upper end of the jitter window of ``attempt`` (0-based), in ms."""
        return min(self.cap_ms, self.base_ms << min(attempt, 62))

    def delay_ms(self, attempt: int, floor_ms: int, rng: random.Random) -> int:
        """``max(floor_ms, uniform(0, window_ms(attempt)))``, in whole ms."""
        own = int(rng.uniform(0, self.window_ms(attempt)))
        return max(floor_ms, own)


def retry_floor(answer: Disconnect | LogonRejected | Reject | None) -> tuple[bool, int]:
    """Whether reconnecting can help after ``answer``, and the server's floor in ms.

    ``answer`` is the Disconnect or LogonRejected that ended the session or attempt, or None
    for a connection that closed, failed or went silent. Final (protocol.md §4.2):
    Disconnect(logout), Disconnect(auth), LogonRejected(auth), LogonRejected(not_entitled).
    """
    if answer is None:
        return True, 0
    reason = int(answer.reason)
    if isinstance(answer, Disconnect):
        final = reason in (schema.DisconnectReason.LOGOUT, schema.DisconnectReason.AUTH)
    elif isinstance(answer, LogonRejected):
        final = reason in (schema.LogonRejectReason.AUTH, schema.LogonRejectReason.NOT_ENTITLED)
    else:
        final = False
    return not final, answer.retry_after_ms


class ReconnectPolicy:
    """The reconnect decisions of one client: next delay, or give up."""

    def __init__(
        self,
        backoff: Backoff | None = None,
        attempts_max: int = ATTEMPTS_MAX,
        stable_after_s: float = STABLE_AFTER_S,
        give_up_after_s: float | None = None,
    ) -> None:
        self.backoff = backoff or Backoff()
        self.attempts_max = attempts_max
        self.stable_after_s = stable_after_s
        self.give_up_after_s = give_up_after_s
        self.attempt = 0
        """Failed attempts since the last stable session: the backoff window's exponent."""
        self.failures = 0
        """Failed attempts in a row since the last logon (bounded by ``attempts_max``)."""
        self.connected_since: float | None = None
        self.outage_since: float | None = None
        """When the current outage started (None: none yet)."""

    def on_connected(self, now: float) -> None:
        """A session logged on at ``now`` (seconds, the caller's clock)."""
        self.connected_since = now

    def next_delay(
        self, now: float, retry: bool, floor_ms: int, rng: random.Random
    ) -> float | None:
        """Seconds to wait before the next attempt, or None to give up.

        Call once per lost session or failed attempt; ``retry`` and ``floor_ms`` as
        :func:`retry_floor` returns them.
        """
        since, self.connected_since = self.connected_since, None
        after_session = since is not None
        if since is not None:  # a session was lost: a new outage starts now
            if now - since >= self.stable_after_s:
                self.attempt = 0
            self.failures = 0
            self.outage_since = now
        elif self.outage_since is None:
            self.outage_since = now
        if not retry or self.failures >= self.attempts_max:
            return None
        delay_s = self.backoff.delay_ms(self.attempt, floor_ms, rng) / 1000
        if self.give_up_after_s is not None and not after_session:
            if now + delay_s - self.outage_since > self.give_up_after_s:
                return None
        self.attempt += 1
        self.failures += 1
        return delay_s
