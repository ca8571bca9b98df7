"""Per-(symbol, tier) sequence tracking (protocol.md §5), without a socket or a clock.

Invariants, for every key (symbol, tier):

- A PriceSnapshot is always accepted and restarts the key: ``expected = seq + 1``.
- A PriceUpdate is ``ok`` at ``expected``, ``gap`` above it (accepted, the gap recorded),
  ``old`` below it (not accepted); a key without an expectation accepts any update.
- Expectations belong to one **stream** (``stream_id``, from LogonAccepted and
  PriceSnapshot; 0 when the server does not carry one). A key is judged ``resumed`` only
  against an expectation of the same stream; when a logon or a snapshot names another
  stream, every expectation is dropped and the next snapshot of each key is a ``resync``:
  sequence numbers of two streams are never compared, so a restarted server is never taken
  for a resume, and no price of the new stream is called ``old``.
- After :meth:`SeqTracker.resume` (a new session of the same stream) the first snapshot of
  each held key is ``resumed`` when its ``seq`` is the last one accepted or the next one,
  else ``resync``.

Bounded: one entry per key; ``gaps`` keeps the last ``GAPS_KEPT`` gaps (``gap_count`` counts
them all).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .model import Price, PriceStatus

Key = tuple[int, int]
GAPS_KEPT = 1000


@dataclass
class SeqTracker:
    """Per-(symbol, tier) expected sequence numbers across sessions (see the module)."""

    expected: dict[Key, int] = field(default_factory=dict)
    gaps: list[tuple[int, int, int, int]] = field(default_factory=list)
    """The last gaps seen: (symbol, tier, expected seq, received seq)."""
    gap_count: int = 0
    accepted: int = 0
    old: int = 0
    resumed: int = 0
    resume_resyncs: int = 0
    stream_id: int = 0
    """The stream the expectations belong to (0: not stated by the server)."""
    stream_changes: int = 0
    """Times a new stream replaced one with expectations held."""
    resuming: set[Key] = field(default_factory=set)
    resync_due: set[Key] = field(default_factory=set)
    """Keys whose next snapshot is a resync whatever its seq (their stream changed)."""

    def resume(self, stream_id: int | None = None) -> None:
        """A session logged on (``stream_id`` from its LogonAccepted; None keeps the one
        held): every held key judges its next snapshot; a new stream drops them all."""
        if stream_id is not None and stream_id != self.stream_id:
            self._new_stream(stream_id)
        self.resuming = set(self.expected)

    def _new_stream(self, stream_id: int) -> None:
        if self.expected:
            self.stream_changes += 1
        self.resync_due |= set(self.expected) | self.resuming
        self.expected.clear()
        self.resuming.clear()
        self.stream_id = stream_id

    def apply(self, price: Price) -> PriceStatus:
        """Apply a PriceSnapshot or PriceUpdate; the verdict."""
        return self.observe(price.symbol_id, price.tier, price.seq, price.snapshot, price.stream_id)

    def observe(
        self, symbol_id: int, tier: int, seq: int, snapshot: bool, stream_id: int = 0
    ) -> PriceStatus:
        """Apply one price given by its parts; the verdict (see the module's rules)."""
        key = (symbol_id, tier)
        if snapshot:
            return self._snapshot(key, seq, stream_id)
        want = self.expected.get(key)
        if want is not None and seq < want:
            self.old += 1
            return PriceStatus.OLD
        self.accepted += 1
        self.expected[key] = seq + 1
        if want is None or seq == want:
            return PriceStatus.OK
        self.gap_count += 1
        self.gaps.append((symbol_id, tier, want, seq))
        if len(self.gaps) > GAPS_KEPT:
            del self.gaps[0]
        return PriceStatus.GAP

    def _snapshot(self, key: Key, seq: int, stream_id: int) -> PriceStatus:
        if stream_id and stream_id != self.stream_id:
            self._new_stream(stream_id)
        want = self.expected.get(key)
        self.expected[key] = seq + 1
        self.accepted += 1
        if key in self.resync_due:
            self.resync_due.discard(key)
            self.resuming.discard(key)
            self.resume_resyncs += 1
            return PriceStatus.RESYNC
        if key not in self.resuming:
            return PriceStatus.SNAPSHOT
        self.resuming.discard(key)
        if want is not None and seq in (want - 1, want):
            self.resumed += 1
            return PriceStatus.RESUMED
        self.resume_resyncs += 1
        return PriceStatus.RESYNC

    def apply_snapshot_entry(self, price: Price) -> None:
        """Apply a SnapshotResponse entry: never moves the expectation backwards."""
        if price.stream_id and price.stream_id != self.stream_id:
            return  # another stream's answer: the stream's own snapshot resyncs the key
        key = price.key
        self.expected[key] = max(self.expected.get(key, 0), price.seq + 1)
