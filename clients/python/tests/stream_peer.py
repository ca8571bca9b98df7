"""The other side of test_stream.py, in its own process (so it does not share the test's
interpreter lock): a provider quoting SYMBOLS round-robin at a target rate, every quote
moving its symbol's bid by one point (so every quote is a new price), and a plain
subscriber that only reads and records every sequence it receives.

    python stream_peer.py PORT FEED_PORT SECONDS RATE_PER_S RESULT_PATH

Prints ``ready`` once subscribed, feeds after a line on stdin, and writes one JSON object
to RESULT_PATH at the end: quotes sent, seconds spent, the plain subscriber's sequences
per symbol and its conflated snapshots (a file: hundreds of KB would fill a pipe nobody
reads while the test is busy).
"""

from __future__ import annotations

import json
import sys
import threading
import time

from pricewire_client import Price, PricewireError, ProviderSession, Quote, Session

SYMBOLS = (0, 1, 2)
TIER = 0
BATCH_MAX = 200
BASE_BID = {0: 108_100, 1: 126_100, 2: 150_100}
QUIET_S = 1.5


class Plain(threading.Thread):
    """Reads every price of SYMBOLS at TIER until stopped and quiet."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sess = Session("127.0.0.1", port)
        self.sess.logon()
        assert all(r.ok for r in self.sess.subscribe(list(SYMBOLS), TIER).results)
        self.seqs: dict[int, list[int]] = {s: [] for s in SYMBOLS}
        self.conflated = 0
        self.stop = threading.Event()
        self.error = ""

    def run(self) -> None:
        last = time.monotonic()
        try:
            while not (self.stop.is_set() and time.monotonic() - last > QUIET_S):
                msg = self.sess.recv(0.2)
                if isinstance(msg, Price):
                    self.seqs[msg.symbol_id].append(msg.seq)
                    self.conflated += msg.conflated
                    last = time.monotonic()
        except PricewireError as err:
            self.error = str(err)


def feed(port: int, seconds: float, rate: float) -> tuple[int, float]:
    """Quote at ``rate`` quotes per second for ``seconds``; (quotes sent, time taken)."""
    prov = ProviderSession("127.0.0.1", port)
    prov.logon(0, "demo-feed")
    sent = 0
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        due = min(int(elapsed * rate) - sent, BATCH_MAX)
        if due <= 0:
            time.sleep(0.0005)  # pacing the feed, not a synchronisation
            continue
        batch = []
        for i in range(sent, sent + due):
            sym = SYMBOLS[i % len(SYMBOLS)]
            bid = BASE_BID[sym] + (i // len(SYMBOLS)) % 2
            batch.append(Quote(sym, bid, bid + 10, provider_time_ns=time.time_ns()))
        prov.quote(batch)
        while prov.recv(0) is not None:
            pass  # heartbeats and Rejects: keep the socket drained
        sent += due
    return sent, time.monotonic() - start


def main(argv: list[str]) -> int:
    port, feed_port, seconds, rate = int(argv[0]), int(argv[1]), float(argv[2]), float(argv[3])
    result_path = argv[4]
    plain = Plain(port)
    plain.start()
    print("ready", flush=True)
    sys.stdin.readline()  # the test's subscriber is subscribed too
    sent, taken, error = 0, 0.0, ""
    try:
        sent, taken = feed(feed_port, seconds, rate)
    except PricewireError as err:  # reported to the test, which fails with it
        error = f"provider: {err}"
    plain.stop.set()
    plain.join(30)
    result = {"sent": sent, "seconds": taken, "seqs": plain.seqs, "conflated": plain.conflated,
              "error": error or plain.error}  # fmt: skip
    with open(result_path, "w") as out:
        json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
