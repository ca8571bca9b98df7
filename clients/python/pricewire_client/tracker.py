"""Per-(symbol, tier) sequence tracking (protocol.md §5), without a socket or a clock.

Invariants, for every key (symbol, tier):

- A PriceSnapshot is always accepted and restarts the key: ``expected = seq + 1``, and the
  key's stream becomes the snapshot's ``streamId`` (0 from a version 2 server).
- A PriceUpdate belongs to the stream of its key's last snapshot (the server sends a
  snapshot first whenever the stream changes). It is ``ok`` at ``expected``, ``gap`` above
  it (accepted, the gap recorded), ``old`` below it (not accepted); a key without an
  expectation accepts any update.
- A snapshot is ``resumed`` (the first of its key after :meth:`SeqTracker.resume`, a new
  session) only if its stream is the key's stream and its ``seq`` is the last one accepted
  or the next. Otherwise it is a ``resync``: prices were missed, or the stream is another
  one — sequence numbers of two streams are never compared, so a restarted server whose
  numbers reach the one held is still a resync. A snapshot that changes its key's stream
  within a session is a ``resync`` too. Against version 2 servers every stream id is 0 and
  the sequences alone decide.

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
    """Per-(symbol, tier) expected sequence numbers and streams across sessions (see the
    module)."""

    expected: dict[Key, int] = field(default_factory=dict)
    streams: dict[Key, int] = field(default_factory=dict)
    """The stream id of each key's last snapshot."""
    gaps: list[tuple[int, int, int, int]] = field(default_factory=list)
    """The last gaps seen: (symbol, tier, expected seq, received seq)."""
    gap_count: int = 0
    accepted: int = 0
    old: int = 0
    resumed: int = 0
    resume_resyncs: int = 0
    stream_changes: int = 0
    """Snapshots that moved a key held to another stream."""
    stream_id: int = 0
    """The stream named by the last LogonAccepted (0: none named)."""
    resuming: set[Key] = field(default_factory=set)

    def resume(self, stream_id: int | None = None) -> None:
        """A session logged on (``stream_id`` from its LogonAccepted): every held key
        judges its next snapshot."""
        if stream_id is not None:
            self.stream_id = stream_id
        self.resuming = set(self.expected)

    def stream_of(self, key: Key) -> int:
        """The stream of ``key``'s last snapshot (0: none, or a version 2 server)."""
        return self.streams.get(key, 0)

    def apply(self, price: Price) -> PriceStatus:
        """Apply a PriceSnapshot or PriceUpdate; the verdict."""
        return self.observe(price.symbol_id, price.tier, price.seq, price.snapshot, price.stream_id)

    def observe(
        self, symbol_id: int, tier: int, seq: int, snapshot: bool, stream_id: int = 0
    ) -> PriceStatus:
        """Apply one price given by its parts (``stream_id``: a snapshot's); the verdict."""
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
        want = self.expected.get(key)
        held = self.streams.get(key)
        self.expected[key] = seq + 1
        self.streams[key] = stream_id
        self.accepted += 1
        same_stream = held is None or held == stream_id
        if not same_stream:
            self.stream_changes += 1
        if key in self.resuming:
            self.resuming.discard(key)
            if same_stream and want is not None and seq in (want - 1, want):
                self.resumed += 1
                return PriceStatus.RESUMED
            self.resume_resyncs += 1
            return PriceStatus.RESYNC
        return PriceStatus.SNAPSHOT if same_stream else PriceStatus.RESYNC

    def apply_snapshot_entry(self, price: Price) -> None:
        """Apply a SnapshotResponse entry (of the key's stream: SnapshotResponse entries
        carry none): never moves the expectation backwards."""
        key = price.key
        self.expected[key] = max(self.expected.get(key, 0), price.seq + 1)
