"""Per-(symbol, tier) sequence tracking (protocol.md §5), without a socket or a clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from .codec import Message


@dataclass
class SeqTracker:
    """Per-(symbol, tier) expected sequence numbers (protocol.md §5).

    The expectations outlive a connection: after :meth:`resume` (a new session, to the same
    server or another edge of the same core), the first snapshot of each key says whether a
    price was missed in between: 'resumed' when its ``seq`` is the last one accepted or the
    next one, 'resync' otherwise (prices were missed, or the server is behind).
    """

    expected: dict[tuple[int, int], int] = field(default_factory=dict)
    gaps: list[tuple[int, int, int, int]] = field(default_factory=list)
    accepted: int = 0
    old: int = 0
    resuming: set[tuple[int, int]] = field(default_factory=set)
    resumed: int = 0
    resume_resyncs: int = 0

    def resume(self) -> None:
        """A new session starts: every tracked key checks its next snapshot against it."""
        self.resuming = set(self.expected)

    def apply(self, msg: Message) -> str:
        """Apply a PriceSnapshot or PriceUpdate: 'snapshot', 'resumed', 'resync', 'ok',
        'old' or 'gap'."""
        key = (msg.int("symbolId"), msg.int("tier"))
        seq = msg.int("seq")
        want = self.expected.get(key)
        if msg.name == "PriceSnapshot":
            self.expected[key] = seq + 1
            self.accepted += 1
            if key not in self.resuming:
                return "snapshot"
            self.resuming.discard(key)
            if want is not None and seq in (want - 1, want):
                self.resumed += 1
                return "resumed"
            self.resume_resyncs += 1
            return "resync"
        if want is not None and seq < want:
            self.old += 1
            return "old"
        self.accepted += 1
        self.expected[key] = seq + 1
        if want is None or seq == want:
            return "ok"
        self.gaps.append((key[0], key[1], want, seq))
        return "gap"

    def apply_snapshot_entry(self, entry: dict[str, int | str]) -> None:
        """Apply a SnapshotResponse entry: never moves the expectation backwards."""
        sym, tier, seq = int(entry["symbolId"]), int(entry["tier"]), int(entry["seq"])
        key = (sym, tier)
        self.expected[key] = max(self.expected.get(key, 0), seq + 1)
