"""The session as a state machine without I/O: bytes and the time in; typed messages,
request answers and bytes to send out. :class:`~pricewire_client.session.Session` (blocking
sockets) and :class:`~pricewire_client.aio.Session` (asyncio) only move bytes and time
through it, so both behave alike and every rule here is tested without a socket.

What a caller relies on:

- **No price is dropped.** :meth:`SessionCore.receive` decodes every complete frame in
  arrival order. Every PriceSnapshot and PriceUpdate is judged by the tracker and appended
  to ``inbox`` exactly once, in order, whatever request or logon is being waited for.
  Answers to requests started with :meth:`SessionCore.start_request` are matched by
  ``requestId`` and kept for their requester, never put in the inbox; a Reject carrying
  such an id becomes that request's :class:`~pricewire_client.errors.RequestRejected`.
- **Old readers skip new templates** (protocol.md §2): a frame of an unknown template, an
  unknown schema or version, or a malformed body is skipped whole, counted in
  ``stats.skipped_frames`` and logged. A framing error (bad length or encoding type) makes
  the stream unusable: the core fails with it.
- **Failures are sticky and come last.** The first terminal error (EOF, reset, framing,
  dead peer) is kept in ``error``; messages received before it stay in the inbox, so a
  reader sees them first, then the error.
- **Bounded.** The inbox holds at most ``inbox_max`` messages. Past that (the caller stopped
  reading while a background reader or a long request kept receiving) it is compacted by
  the rule the server applies to a slow consumer (§5): heartbeats are dropped and each
  key's prices are replaced by its newest, delivered as a snapshot flagged ``conflated``
  with status ``resync``; ``stats.conflated`` counts the prices replaced. Ids of
  abandoned requests are kept at most ``ABANDONED_MAX``. The reader buffer holds at most one
  1 MiB frame plus one read.
- On a sequence gap the core sends a critical SnapshotRequest for the key (§5) and applies
  its answer to the tracker; the answer itself is put in the inbox.
- After a Reject(rate_limited), ``quiet_until`` is when requests may be sent again (§4.2,
  §9): the sessions hold new requests until then, reading meanwhile, or raise that Reject
  at once when the wait would outlast the request's timeout.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from . import messages, schema
from .codec import FrameReader, Message, decode, encode
from .errors import (
    CodecError,
    ConnectionLost,
    FramingError,
    LogonRefused,
    PricewireError,
    RequestRejected,
    UnknownTemplateError,
)
from .model import (
    PRICE_STRUCT,
    Answer,
    Disconnect,
    Heartbeat,
    Incoming,
    LogonAccepted,
    LogonRejected,
    Price,
    PriceStatus,
    Reject,
    SnapshotResponse,
    from_message,
)
from .schema import PriceFlags, RejectReason
from .tracker import Key, SeqTracker

log = logging.getLogger(__name__)

INBOX_MAX = 65_536
"""Messages held for the caller before the inbox is compacted."""
INBOX_HIGH_WATER = 8_192
"""Messages held above which a background reader stops reading while no request waits
(then the server's own slow-consumer handling, conflation, takes over)."""
ABANDONED_MAX = 1_024
DEAD_AFTER_HEARTBEATS = 3
"""A peer that sent nothing for this many heartbeat intervals is dead (protocol.md §4.1)."""
TIMER_SLACK_S = 1e-6
"""A timer due within this is due now (a wait of the remaining float error cannot move a
clock that only moves by waits)."""

_HEADER = struct.Struct("<HHHH")
_U64 = struct.Struct("<Q")
_PRICE_TEMPLATES = {15: True, 16: False}  # template id -> snapshot
_PRICE_BLOCK = 62
_STREAM_OFFSET = schema.FRAME_LEN_MIN + _PRICE_BLOCK
_ANSWERS = ("SymbolDirectory", "SubscribeResponse", "SnapshotResponse", "HistoryResponse")
_LOGON_TEMPLATES = (1, 30)


@dataclass
class SessionStats:
    """Counters of one session (all since it was made)."""

    frames: int = 0
    prices: int = 0
    skipped_frames: int = 0
    """Frames skipped whole: unknown template, schema or version, or a malformed body."""
    conflated: int = 0
    """Prices replaced by a newer one of their key when the inbox overflowed."""
    orphans: int = 0
    """Answers and Rejects for no request this session waits for."""
    heartbeats_sent: int = 0
    resync_requests: int = 0


class SessionCore:
    """One session's protocol state (see the module for the contract)."""

    def __init__(
        self,
        tracker: SeqTracker | None = None,
        *,
        now: float = 0.0,
        inbox_max: int = INBOX_MAX,
        resync_on_gap: bool = True,
        dead_after_heartbeats: int = DEAD_AFTER_HEARTBEATS,
    ) -> None:
        if inbox_max < 16:
            raise ValueError(f"inbox_max must be at least 16, got {inbox_max}")
        self.tracker = tracker if tracker is not None else SeqTracker()
        self.reader = FrameReader()
        self.inbox: deque[Incoming] = deque()
        self.inbox_max = inbox_max
        self.latest: dict[Key, Price] = {}
        """The newest price received per (symbol, tier)."""
        self.stats = SessionStats()
        self.accepted: LogonAccepted | None = None
        self.heartbeat_ms = 0
        """The heartbeat interval from LogonAccepted (0: no heartbeats, no dead-peer check)."""
        self.dead_after_heartbeats = dead_after_heartbeats
        self.resync_on_gap = resync_on_gap
        self.last_sent = self.last_received = now
        self.error: PricewireError | None = None
        self.disconnect: Disconnect | None = None
        self.logged_out = False
        self.quiet_until = 0.0
        """Until when requests wait: the last Reject(rate_limited)'s floor (§4.2: send
        nothing but Heartbeats until it has passed)."""
        self.quiet_reject: Reject | None = None
        self._out = bytearray()
        self._next_rid = 1
        self._pending: set[int] = set()
        self._answers: dict[int, Answer | PricewireError] = {}
        self._abandoned: dict[int, None] = {}
        self._resync_rids: set[int] = set()
        self._logon_pending = False
        self._logon_refused: LogonRefused | None = None

    # ---- sending ----------------------------------------------------------------------

    def request_id(self) -> int:
        """A fresh request id."""
        rid = self._next_rid
        self._next_rid += 1
        return rid

    def send(self, msg: Message | bytes, now: float) -> None:
        """Queue one message (or raw bytes) for sending."""
        self._out += encode(msg) if isinstance(msg, Message) else msg
        self.last_sent = now
        if isinstance(msg, Message) and msg.name == "Logout":
            self.logged_out = True

    def outgoing(self) -> bytes:
        """The bytes queued for sending (taken: the next call returns only newer ones)."""
        data = bytes(self._out)
        self._out.clear()
        return data

    def start_logon(self, msg: Message, now: float) -> None:
        """Send a Logon or ProviderLogon; :meth:`logon_result` tells the outcome."""
        self._raise_if_refused()
        self.raise_if_failed()
        self._logon_pending = True
        self._logon_refused = None
        self.send(msg, now)

    def logon_result(self) -> LogonAccepted | None:
        """The LogonAccepted once it came, None while waiting; raises
        :class:`~pricewire_client.errors.LogonRefused` or the session's error."""
        if self._logon_refused is not None:
            raise self._logon_refused
        if self.accepted is not None and not self._logon_pending:
            return self.accepted
        self._raise_if_refused()
        self.raise_if_failed()
        return None

    def _raise_if_refused(self) -> None:
        """A Disconnect before any logon (busy at accept) refuses the logon, whether it
        came before or after the Logon was sent."""
        if self.accepted is None and self.disconnect is not None:
            raise LogonRefused(self.disconnect)

    @property
    def waiting(self) -> bool:
        """Whether a logon or a request waits for its answer."""
        return self._logon_pending or bool(self._pending)

    def quiet_left(self, now: float, timeout_s: float) -> float:
        """Seconds a request made at ``now`` must wait for the rate limit's floor (0: none);
        :class:`~pricewire_client.errors.RequestRejected` (the Reject that set it) when
        that is longer than ``timeout_s``."""
        left = self.quiet_until - now
        if left <= 0:
            return 0.0
        if left > timeout_s and self.quiet_reject is not None:
            raise RequestRejected(self.quiet_reject)
        return left

    def start_request(self, build: Callable[[int], Message], now: float) -> int:
        """Send the request ``build`` makes for a fresh id; the id."""
        self.raise_if_failed()
        rid = self.request_id()
        self._pending.add(rid)
        self.send(build(rid), now)
        return rid

    def take_answer(self, rid: int) -> Answer | None:
        """The answer to request ``rid`` once it came (taken), None while waiting; raises
        :class:`~pricewire_client.errors.RequestRejected` or the error that ended the
        session."""
        answer = self._answers.pop(rid, None)
        if isinstance(answer, PricewireError):
            raise answer
        if answer is not None:
            return answer
        if self.error is not None:
            self._pending.discard(rid)
            raise self.error
        return None

    def abandon(self, rid: int) -> None:
        """The requester gave up on ``rid`` (timeout, cancel): its answer is dropped."""
        self._pending.discard(rid)
        self._answers.pop(rid, None)
        self._abandoned[rid] = None
        while len(self._abandoned) > ABANDONED_MAX:
            del self._abandoned[next(iter(self._abandoned))]

    # ---- receiving --------------------------------------------------------------------

    def raise_if_failed(self) -> None:
        """Raise the error that ended the session, if any."""
        if self.error is not None:
            raise self.error

    def fail(self, err: PricewireError) -> None:
        """End the session with ``err`` (the first error wins)."""
        if self.error is None:
            self.error = err
            self._pending.clear()

    def connection_lost(self, detail: str) -> None:
        """The transport ended (EOF, reset): fail with ConnectionLost, naming the
        Disconnect that came first, if any."""
        disc = self.disconnect
        if disc is not None:
            detail = f"Disconnect({disc.reason_name}) {disc.text!r}"
        self.fail(ConnectionLost(detail, disc))

    def receive(self, data: bytes, now: float) -> None:
        """Feed received bytes: every complete frame is handled in order."""
        if self.error is not None or not data:
            return
        self.reader.feed(data)
        self.last_received = now
        while True:
            try:
                frame = self.reader.next_frame()
            except FramingError as err:
                self.fail(err)
                return
            if frame is None:
                return
            self.stats.frames += 1
            self._frame(frame, now)

    def pop(self) -> Incoming | None:
        """The oldest message held for the caller (taken), or None."""
        return self.inbox.popleft() if self.inbox else None

    def _frame(self, frame: bytes, now: float) -> None:
        block, template, schema_id, version = _HEADER.unpack_from(frame, schema.SOFH_LEN)
        snapshot = _PRICE_TEMPLATES.get(template)
        if (
            snapshot is not None
            and schema_id == schema.SCHEMA_ID
            and version >= 1
            and _PRICE_BLOCK <= block <= len(frame) - schema.FRAME_LEN_MIN
        ):
            self._fast_price(frame, block, snapshot, now)
            return
        try:
            msg = decode(frame)
        except CodecError as err:
            self._skip(template, err)
            return
        self._dispatch(from_message(msg), now)

    def _skip(self, template: int, err: CodecError) -> None:
        self.stats.skipped_frames += 1
        level = logging.DEBUG if self.stats.skipped_frames > 10 else logging.WARNING
        kind = "unknown template" if isinstance(err, UnknownTemplateError) else "unreadable"
        log.log(level, "skipped a frame (%s, template %d): %s", kind, template, err)

    @property
    def stream_id(self) -> int:
        """The session's stream id from LogonAccepted (0: none stated)."""
        return self.accepted.stream_id if self.accepted is not None else 0

    def _fast_price(self, frame: bytes, block: int, snap: bool, now: float) -> None:
        """A price straight from its block: the common frame, without a dict per field."""
        sym, tier, flags, digits, provs, seq, bid, ask, bsz, asz, pt, et = PRICE_STRUCT.unpack_from(
            frame, schema.FRAME_LEN_MIN
        )
        stream = 0
        if not snap:
            stream = self.tracker.stream_of((sym, tier))
        elif block >= _PRICE_BLOCK + 8:
            (stream,) = _U64.unpack_from(frame, _STREAM_OFFSET)
        status = self.tracker.observe(sym, tier, seq, snap, stream)
        price = Price(
            sym,
            tier,
            seq,
            bid,
            ask,
            digits,
            PriceFlags(flags),
            provs,
            bsz,
            asz,
            pt,
            et,
            snap,
            stream,
            status,
        )
        self._deliver_price(price, now)

    def _deliver_price(self, price: Price, now: float) -> None:
        self.stats.prices += 1
        self.latest[price.key] = price
        self._push(price)
        if price.status == PriceStatus.GAP:
            want = self.tracker.gaps[-1][2] if self.tracker.gaps else 0
            log.warning("sequence gap on %s: expected %d, got %d", price.key, want, price.seq)
            if self.resync_on_gap:
                self._resync(price.symbol_id, price.tier, now)

    def _resync(self, symbol_id: int, tier: int, now: float) -> None:
        rid = self.request_id()
        self._resync_rids.add(rid)
        self.stats.resync_requests += 1
        self.send(messages.snapshot_request(rid, [symbol_id], tier, critical=True), now)

    def _dispatch(self, item: Incoming, now: float) -> None:
        if isinstance(item, Price):
            stream = item.stream_id if item.snapshot else self.tracker.stream_of(item.key)
            status = self.tracker.observe(item.symbol_id, item.tier, item.seq, item.snapshot,
                                          stream)  # fmt: skip
            self._deliver_price(replace(item, status=status, stream_id=stream), now)
        elif isinstance(item, LogonAccepted | LogonRejected) and self._logon_pending:
            self._logon_answer(item)
        elif isinstance(item, Disconnect):
            self._disconnected(item)
        elif isinstance(item, Reject):
            self._reject(item, now)
        elif item.name in _ANSWERS:
            self._answer(item)  # type: ignore[arg-type]
        else:
            self._push(item)

    def _logon_answer(self, item: LogonAccepted | LogonRejected) -> None:
        self._logon_pending = False
        if isinstance(item, LogonRejected):
            self._logon_refused = LogonRefused(item)
            return
        self.accepted = item
        self.heartbeat_ms = item.heartbeat_interval_ms
        self.tracker.resume(item.stream_id)

    def _disconnected(self, item: Disconnect) -> None:
        self.disconnect = item
        level = logging.INFO if item.reason_name == "logout" else logging.WARNING
        log.log(
            level,
            "Disconnect(%s) retry after %d ms: %r",
            item.reason_name,
            item.retry_after_ms,
            item.text,
        )
        if self._logon_pending:
            self._logon_pending = False
            self._logon_refused = LogonRefused(item)
        lost = ConnectionLost(f"Disconnect({item.reason_name}) {item.text!r}", item)
        for rid in self._pending:
            self._answers[rid] = lost
        self._pending.clear()
        self._push(item)

    def _reject(self, item: Reject, now: float) -> None:
        rid = item.request_id
        if item.reason == RejectReason.RATE_LIMITED and item.retry_after_ms:
            until = now + item.retry_after_ms / 1000
            if until > self.quiet_until:
                self.quiet_until, self.quiet_reject = until, item
        if rid in self._pending:
            self._pending.discard(rid)
            self._answers[rid] = RequestRejected(item)
        elif self._logon_pending and item.ref_template_id in _LOGON_TEMPLATES:
            self._logon_pending = False
            self._logon_refused = LogonRefused(item)
        elif rid in self._abandoned:
            del self._abandoned[rid]  # the requester gave up on it
        else:
            self.stats.orphans += 1
            log.warning(
                "Reject(%s) of template %d for no waiting request: %r",
                item.reason_name,
                item.ref_template_id,
                item.text,
            )
            self._push(item)

    def _answer(self, item: Answer) -> None:
        rid = item.request_id
        if rid in self._resync_rids and isinstance(item, SnapshotResponse):
            self._resync_rids.discard(rid)
            for entry in item.prices:
                self.tracker.apply_snapshot_entry(entry)
        if rid in self._pending:
            self._pending.discard(rid)
            self._answers[rid] = item
        elif rid in self._abandoned:
            del self._abandoned[rid]
        else:
            self._push(item)

    def _push(self, item: Incoming) -> None:
        self.inbox.append(item)
        if len(self.inbox) >= self.inbox_max:
            self._compact()

    def _compact(self) -> None:
        """Newest wins per key, the older prices counted as conflated (see the module)."""
        items = list(self.inbox)
        last = {m.key: i for i, m in enumerate(items) if isinstance(m, Price)}
        replaced: set[Key] = set()
        kept: deque[Incoming] = deque()
        for i, m in enumerate(items):
            if isinstance(m, Heartbeat):
                continue
            if isinstance(m, Price):
                if last[m.key] != i:
                    replaced.add(m.key)
                    continue
                if m.key in replaced:
                    flags = m.flags | PriceFlags.CONFLATED
                    m = replace(m, snapshot=True, flags=flags, status=PriceStatus.RESYNC)
            kept.append(m)
        dropped = sum(isinstance(m, Price) for m in items) - sum(isinstance(m, Price) for m in kept)
        self.stats.conflated += dropped
        self.inbox = kept
        log.warning(
            "inbox over %d messages: %d older prices conflated (newest per key kept)",
            self.inbox_max,
            dropped,
        )

    @property
    def reading_paused(self) -> bool:
        """Whether a background reader should stop reading: the caller is far behind and
        no answer is awaited (see ``INBOX_HIGH_WATER``)."""
        return len(self.inbox) >= min(INBOX_HIGH_WATER, self.inbox_max // 2) and not self.waiting

    # ---- time -------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        """When :meth:`timer` has something to do next (None: never, no heartbeats)."""
        if not self.heartbeat_ms or self.error is not None:
            return None
        interval_s = self.heartbeat_ms / 1000
        due = self.last_sent + interval_s
        if self.accepted is not None and self.dead_after_heartbeats:
            due = min(due, self.last_received + self.dead_after_heartbeats * interval_s)
        return due

    def timer(self, now: float, check_dead: bool = True) -> None:
        """Heartbeat when nothing was sent for an interval; fail a peer silent for
        ``dead_after_heartbeats`` intervals (after logon; not with ``check_dead`` False,
        for a reader that stopped reading on purpose)."""
        if not self.heartbeat_ms or self.error is not None:
            return
        interval_s = self.heartbeat_ms / 1000
        silent_s = now - self.last_received
        if (
            check_dead
            and self.accepted is not None
            and self.dead_after_heartbeats
            and silent_s + TIMER_SLACK_S >= self.dead_after_heartbeats * interval_s
        ):
            self.fail(ConnectionLost(f"dead peer: nothing received for {silent_s:.1f} s"))
            return
        if now - self.last_sent + TIMER_SLACK_S >= interval_s:
            self.send(messages.heartbeat(), now)
            self.stats.heartbeats_sent += 1
