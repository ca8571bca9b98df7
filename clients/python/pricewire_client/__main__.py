"""``python -m pricewire_client watch SYMBOL...``: print live prices of some symbols.

Logs on, subscribes by name at a tier and prints one line per price: time, symbol, tier,
seq, bid, ask and the price flags. ``--connect host:port,host:port`` lists the gateways
(the edges of one core): the first is tried first, and after a lost connection the watch
moves to the next one with :class:`~pricewire_client.subscriber.Subscriber`: it waits
``max(retryAfterMs, full-jitter exponential backoff)`` (protocol.md §4.2), logs on again,
subscribes again and resumes by sequence: a symbol that missed no price says ``resumed``,
one that did is resynced by its snapshot. It stops for good after Disconnect(logout/auth)
or LogonRejected(auth/not_entitled). Bounded by ``--seconds``, ``--count`` and
``--max-reconnects`` (failed attempts in a row).

The token comes from ``--token-file`` (its first line), else ``--token``, else the
``PRICEWIRE_TOKEN`` environment variable, else ``demo``, as for ``pricewire watch``
(docs/security.md, "Secrets on the command line"): a token typed on the command line is in
``ps`` output for every user of the host, so one other than ``demo`` draws a warning.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TextIO

from . import schema
from .messages import flag_names, format_price
from .model import Price, SubscribeResponse
from .reconnect import Backoff, ReconnectPolicy
from .subscriber import Event, Subscriber, parse_addresses

BACKOFF_BASE_MS = 250
BACKOFF_CAP_MS = 30_000


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(prog="python -m pricewire_client")
    sub = parser.add_subparsers(dest="command", required=True)
    watch = sub.add_parser("watch", help="print live prices of symbols")
    watch.add_argument("symbols", nargs="+", metavar="SYMBOL")
    watch.add_argument(
        "--connect",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="gateways to fail over between, in order (default: --host:--port)",
    )
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
    watch.add_argument("--max-reconnects", type=int, default=10, help="failed attempts in a row")
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
    """One watch run: the subscriber's events as printed lines."""

    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.args = args
        self.out = out
        self.names: dict[int, str] = {}
        self.reported: set[str] = set()
        self.printed = 0
        self.deadline = time.monotonic() + args.seconds if args.seconds > 0 else float("inf")

    def done(self) -> bool:
        """Whether --seconds or --count is reached."""
        count_done = self.args.count > 0 and self.printed >= self.args.count
        return count_done or time.monotonic() >= self.deadline

    def note(self, text: str) -> None:
        """A ``#`` line."""
        print(f"# {text}", file=self.out)

    def subscribed(self, resp: SubscribeResponse) -> None:
        """Learn names from a SubscribeResponse; report refused entries once."""
        for res in resp.results:
            label = res.name or str(res.symbol_id)
            if res.ok:
                self.names[res.symbol_id] = label
            elif label not in self.reported:
                self.reported.add(label)
                self.note(f"{label}: {res.status_name}")

    def show(self, msg: Price, status: str) -> None:
        """Print one price line (and a note on a gap or a resume)."""
        name = self.names.get(msg.symbol_id, str(msg.symbol_id))
        kind = "snap" if msg.snapshot else "upd "
        bid = format_price(msg.bid, msg.digits)
        ask = format_price(msg.ask, msg.digits)
        flags = flag_names(msg.flags) or "-"
        line = f"{name:<8} t{msg.tier} seq {msg.seq:>8} {bid:>12} {ask:>12}"
        print(f"{time.strftime('%H:%M:%S')} {line} {kind} {flags}", file=self.out)
        if status == "gap":
            self.note(f"gap before seq {msg.seq}: resync requested")
        elif status == "resumed":
            self.note(f"{name}: resumed by sequence, no price missed")
        elif status == "resync":
            self.note(f"{name}: prices missed while away, resynced by this snapshot")
        self.printed += 1

    def on_event(self, ev: Event) -> None:
        """Print what one event means for the terminal."""
        if ev.price is not None:
            self.show(ev.price, ev.status)
        elif isinstance(ev.msg, SubscribeResponse):
            self.subscribed(ev.msg)
        elif ev.kind == "logon" and ev.address is not None:
            self.note(f"logged on at {ev.address[0]}:{ev.address[1]}")
        elif ev.kind == "disconnected":
            wait = "" if ev.retry_in_s is None else f"; next attempt in {ev.retry_in_s:.3f} s"
            self.note(f"disconnected: {ev.reason}{wait}")


def run_watch(args: argparse.Namespace, out: TextIO) -> int:
    """The watch loop with failover; the exit code."""
    try:
        addresses = parse_addresses(args.connect or f"{args.host}:{args.port}", args.host)
    except ValueError as err:
        print(f"# --connect: {err}", file=out)
        return 2
    policy = ReconnectPolicy(Backoff(BACKOFF_BASE_MS, BACKOFF_CAP_MS), args.max_reconnects)
    try:
        token = resolve_token(args, dict(os.environ), sys.stderr)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sub = Subscriber(addresses, args.account, token, args.heartbeat_ms, policy=policy)
    sub.subscribe(list(args.symbols), args.tier)
    watch = Watch(args, out)
    try:
        while not watch.done():
            ev = sub.next_event(min(0.5, max(watch.deadline - time.monotonic(), 0.001)))
            if ev is None:
                continue
            if ev.kind == "closed":
                watch.note(f"stopped: {ev.reason}")
                return 1
            watch.on_event(ev)
        return 0
    finally:
        sub.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m pricewire_client``."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run_watch(args, sys.stdout)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
