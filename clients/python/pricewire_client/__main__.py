"""``python -m pricewire_client watch SYMBOL...``: print live prices of some symbols.

Logs on, reads the symbol directory, subscribes by name at a tier and prints one line per
price: time, symbol, tier, seq, bid, ask and the price flags. A sequence gap is reported
and resynced with a critical SnapshotRequest. On Disconnect or a dead connection it
reconnects after ``max(retryAfterMs, jittered exponential backoff)`` (protocol.md §4.2),
except after Disconnect(logout/auth) or LogonRejected(auth). Bounded by ``--seconds``,
``--count`` and ``--max-reconnects``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import TextIO

from . import schema
from .codec import Message
from .messages import flag_names, format_price
from .session import ConnectionClosed, LogonRefused, Session

BACKOFF_BASE_MS = 250
BACKOFF_CAP_MS = 30_000


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(prog="python -m pricewire_client")
    sub = parser.add_subparsers(dest="command", required=True)
    watch = sub.add_parser("watch", help="print live prices of symbols")
    watch.add_argument("symbols", nargs="+", metavar="SYMBOL")
    watch.add_argument("--host", default="127.0.0.1")
    watch.add_argument("--port", type=int, default=9400)
    watch.add_argument("--account", default="demo")
    watch.add_argument("--token", default="demo")
    watch.add_argument("--tier", type=int, default=schema.DEFAULT_TIER, help="255 = default")
    watch.add_argument("--heartbeat-ms", type=int, default=0, help="0 = server default")
    watch.add_argument("--seconds", type=float, default=0, help="stop after (0 = never)")
    watch.add_argument("--count", type=int, default=0, help="stop after N prices (0 = never)")
    watch.add_argument("--max-reconnects", type=int, default=10)
    return parser.parse_args(argv)


class Watch:
    """One watch run: sessions, reconnects and the printed lines."""

    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.args = args
        self.out = out
        self.names: dict[int, str] = {}
        self.printed = 0
        self.deadline = time.monotonic() + args.seconds if args.seconds > 0 else float("inf")

    def done(self) -> bool:
        """Whether --seconds or --count is reached."""
        count_done = self.args.count > 0 and self.printed >= self.args.count
        return count_done or time.monotonic() >= self.deadline

    def start(self) -> Session:
        """Connect, log on, read the directory, subscribe."""
        sess = Session(self.args.host, self.args.port)
        sess.logon(self.args.account, self.args.token, self.args.heartbeat_ms)
        directory = sess.symbols()
        if directory.name == "SymbolDirectory":
            self.names = {int(s["symbolId"]): str(s["name"]) for s in directory.groups["symbols"]}
        resp = sess.subscribe(list(self.args.symbols), self.args.tier)
        for res in resp.groups.get("results", []):
            if res["status"] != schema.SubscribeStatus.OK:
                status = schema.SubscribeStatus(int(res["status"])).name.lower()
                print(f"# {res['name'] or res['symbolId']}: {status}", file=self.out)
        return sess

    def show(self, sess: Session, msg: Message) -> None:
        """Print one price line (and a note on a gap)."""
        gaps = len(sess.tracker.gaps)
        name = self.names.get(msg.int("symbolId"), str(msg.int("symbolId")))
        digits = msg.int("digits")
        kind = "snap" if msg.name == "PriceSnapshot" else "upd "
        bid = format_price(msg.int("bid"), digits)
        ask = format_price(msg.int("ask"), digits)
        flags = flag_names(msg.int("flags")) or "-"
        line = f"{name:<8} t{msg.int('tier')} seq {msg.int('seq'):>8} {bid:>12} {ask:>12}"
        print(f"{time.strftime('%H:%M:%S')} {line} {kind} {flags}", file=self.out)
        if gaps and sess.tracker.gaps[-1][3] == msg.int("seq"):
            print(f"# gap before seq {msg.int('seq')}: resync requested", file=self.out)
        self.printed += 1

    def pump(self, sess: Session) -> Message | None:
        """Print prices until done or the server ends the session; its Disconnect, if any."""
        while not self.done():
            msg = sess.recv(min(0.5, max(self.deadline - time.monotonic(), 0.001)))
            if msg is None:
                continue
            if msg.name in ("PriceSnapshot", "PriceUpdate"):
                self.show(sess, msg)
            elif msg.name == "Disconnect":
                return msg
        return None


def backoff_ms(attempt: int, floor_ms: int) -> int:
    """max(retryAfterMs, full-jitter exponential backoff), protocol.md §4.2."""
    own = random.uniform(0, min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2**attempt))
    return max(floor_ms, int(own))


def run_watch(args: argparse.Namespace, out: TextIO) -> int:
    """The watch loop with reconnects; the exit code."""
    watch = Watch(args, out)
    for attempt in range(args.max_reconnects + 1):
        floor_ms = 0
        try:
            sess = watch.start()
            disc = watch.pump(sess)
            if disc is None:
                sess.logout(2.0)
                return 0
            print(f"# disconnected: {disc.fields} {disc.text('text')!r}", file=out)
            if disc.int("reason") in (schema.DisconnectReason.LOGOUT, schema.DisconnectReason.AUTH):
                return 1
            floor_ms = disc.int("retryAfterMs")
        except LogonRefused as err:
            print(f"# {err}", file=out)
            if err.answer.get("reason") == schema.LogonRejectReason.AUTH:
                return 1
            floor_ms = int(err.answer.get("retryAfterMs"))
        except (ConnectionClosed, OSError, TimeoutError) as err:
            print(f"# connection lost: {err}", file=out)
        wait_s = backoff_ms(attempt, floor_ms) / 1000
        if watch.done() or time.monotonic() + wait_s >= watch.deadline:
            return 0 if watch.done() else 1
        time.sleep(wait_s)  # reconnect backoff: the protocol's floor, not a synchronisation
    return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m pricewire_client``."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run_watch(args, sys.stdout)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
