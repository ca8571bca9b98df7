"""``python -m pricewire_client watch SYMBOL...``: print live prices of some symbols.

Logs on, reads the symbol directory, subscribes by name at a tier and prints one line per
price: time, symbol, tier, seq, bid, ask and the price flags. A sequence gap is reported
and resynced with a critical SnapshotRequest. On Disconnect or a dead connection it
reconnects after ``max(retryAfterMs, jittered exponential backoff)`` (protocol.md §4.2),
except after Disconnect(logout/auth) or LogonRejected(auth). Bounded by ``--seconds``,
``--count`` and ``--max-reconnects``.

The token comes from ``--token-file`` (its first line), else ``--token``, else the
``PRICEWIRE_TOKEN`` environment variable, else ``demo``, as for ``pricewire watch``
(docs/security.md, "Secrets on the command line"): a token typed on the command line is in
``ps`` output for every user of the host, so one other than ``demo`` draws a warning.
"""

from __future__ import annotations

import argparse
import os
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
    tokens = watch.add_mutually_exclusive_group()
    tokens.add_argument("--token", help="visible in ps: prefer --token-file or PRICEWIRE_TOKEN")
    tokens.add_argument("--token-file", metavar="PATH", help="first line is the token")
    watch.add_argument("--tier", type=int, default=schema.DEFAULT_TIER, help="255 = default")
    watch.add_argument("--heartbeat-ms", type=int, default=0, help="0 = server default")
    watch.add_argument("--seconds", type=float, default=0, help="stop after (0 = never)")
    watch.add_argument("--count", type=int, default=0, help="stop after N prices (0 = never)")
    watch.add_argument("--max-reconnects", type=int, default=10)
    return parser.parse_args(argv)


TOKEN_ENV = "PRICEWIRE_TOKEN"
TOKEN_DEFAULT = "demo"
TOKEN_FILE_MAX = 4096


def resolve_token(args: argparse.Namespace, env: dict[str, str], err: TextIO) -> str:
    """The logon token (see the module docs); ValueError names a refused source."""
    if args.token_file is not None:
        with open(args.token_file, "rb") as f:
            data = f.read(TOKEN_FILE_MAX + 1)
        if len(data) > TOKEN_FILE_MAX:
            raise ValueError(f"--token-file {args.token_file}: larger than {TOKEN_FILE_MAX} bytes")
        text = data.decode()
        line = text[:-1] if text.endswith("\n") else text
        line = line[:-1] if line.endswith("\r") else line
        if not line:
            raise ValueError(f"--token-file {args.token_file}: empty")
        if "\n" in line or "\r" in line:
            raise ValueError(f"--token-file {args.token_file}: more than one line")
        return line
    if args.token is not None:
        if args.token != TOKEN_DEFAULT:
            print(
                "warning: --token puts the secret in the process list (ps) and shell "
                "history, visible to other users of this host; use --token-file PATH or "
                f"{TOKEN_ENV} instead",
                file=err,
            )
        return str(args.token)
    if TOKEN_ENV in env:
        if not env[TOKEN_ENV]:
            raise ValueError(f"{TOKEN_ENV}: set but empty")
        return env[TOKEN_ENV]
    return TOKEN_DEFAULT


class Watch:
    """One watch run: sessions, reconnects and the printed lines."""

    def __init__(self, args: argparse.Namespace, out: TextIO, token: str = TOKEN_DEFAULT) -> None:
        self.args = args
        self.token = token
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
        sess.logon(self.args.account, self.token, self.args.heartbeat_ms)
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
    try:
        token = resolve_token(args, dict(os.environ), sys.stderr)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    watch = Watch(args, out, token)
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
