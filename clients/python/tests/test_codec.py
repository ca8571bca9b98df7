"""The codec against docs/protocol.md §8: every worked example decodes to the values its
annotations state and re-encodes byte for byte. Plus the framing and sequence rules as
pure unit tests (no socket)."""

from __future__ import annotations

import re
import struct

import pytest

from pricewire_client import FrameReader, Price, SeqTracker, decode, encode, schema
from pricewire_client.codec import FramingError, MalformedError, Message, raw_frame

from server import REPO_ROOT

DOC = (REPO_ROOT / "docs" / "protocol.md").read_text()
EXAMPLE_RE = re.compile(r"<!-- generated:example:(\w+) -->\n```text\n(.*?)```", re.S)
LINE_RE = re.compile(r"^([0-9a-f]{4})  ((?:[0-9a-f]{2} )*[0-9a-f]{2})\s+(.*)$")
EXAMPLES = {m.group(1): m.group(2) for m in EXAMPLE_RE.finditer(DOC)}
HEADER_NAMES = {"blockLength", "templateId", "schemaId", "version"}
REASON_ENUMS = {
    "LogonRejected": schema.LogonRejectReason,
    "Disconnect": schema.DisconnectReason,
    "Reject": schema.RejectReason,
}


def parse_dump(text: str) -> tuple[bytes, list[tuple[str, str]]]:
    """The bytes of a dump and its (name, value) annotations; offsets are checked."""
    out = bytearray()
    notes: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = LINE_RE.match(line)
        assert match, f"unparsed dump line: {line!r}"
        assert int(match.group(1), 16) == len(out), line
        out += bytes.fromhex(match.group(2))
        name, _, value = match.group(3).partition(" = ")
        notes.append((name, value))
    return bytes(out), notes


def expected_value(msg: Message, name: str, value: str) -> int | str:
    """An annotation's value as the codec would decode it."""
    if value.startswith('"'):
        return value.strip('"')
    if value.startswith("0x"):
        return int(value.split()[0], 16)
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if value in ("true", "false"):
        return int(value == "true")
    enum = schema.SubscribeStatus if name.endswith("status") else REASON_ENUMS[msg.name]
    return int(enum[value.upper()])


def decoded_value(msg: Message, name: str) -> int | str:
    """The decoded value an annotation names (``f``, ``group[i].f``)."""
    match = re.fullmatch(r"(\w+)\[(\d+)\]\.(\w+)", name)
    if match:
        return msg.groups[match.group(1)][int(match.group(2))][match.group(3)]
    if name in msg.data:
        return msg.text(name)
    return msg.fields[name]


def test_doc_has_the_worked_examples() -> None:
    assert len(EXAMPLES) >= 13, sorted(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_worked_example_round_trips(name: str) -> None:
    frame, notes = parse_dump(EXAMPLES[name])
    msg = decode(frame)
    assert encode(msg) == frame
    checked = 0
    for field, value in notes:
        if field.startswith("SOFH") or field in HEADER_NAMES or ": " in field:
            continue
        assert decoded_value(msg, field) == expected_value(msg, field, value), field
        checked += 1
    assert checked > 0 or msg.name in ("Heartbeat", "Logout")  # no fields to check


def test_every_message_encodes_and_decodes() -> None:
    for spc in schema.MESSAGES:
        msg = Message(spc.name)
        for fld in spc.fields:
            msg.fields[fld.name] = "AB" if fld.kind == "name16" else 7
        for grp in spc.groups:
            entry = {f.name: ("XY" if f.kind == "name16" else 3) for f in grp.fields}
            msg.groups[grp.name] = [entry, entry]
        for name in spc.data:
            msg.data[name] = b"hi"
        back = decode(encode(msg))
        assert (back.name, back.fields, back.groups, back.data) == (
            msg.name, msg.fields, msg.groups, msg.data,
        )  # fmt: skip


def test_longer_blocks_and_entries_are_skipped() -> None:
    """A newer sender's appended fields are skipped by the wire's blockLength."""
    body = struct.pack("<Q", 5) + b"\xaa" * 4  # requestId, 4 unknown bytes
    body += struct.pack("<HH", 21, 1) + struct.pack("<H16sB", 3, b"EURUSD", 0) + b"\xbb\xbb"
    msg = decode(raw_frame(14, body, 12, version=2) + b"trailing")
    assert msg.int("requestId") == 5
    assert msg.groups["results"] == [{"symbolId": 3, "name": "EURUSD", "status": 0}]


def test_short_block_is_malformed() -> None:
    with pytest.raises(MalformedError):
        decode(raw_frame(21, b"\0" * 10, 10))


def test_reader_splits_a_stream_and_refuses_bad_sofh_early() -> None:
    frames = encode(Message("Heartbeat")) * 3
    reader = FrameReader()
    got = []
    for byte in frames:
        reader.feed(bytes([byte]))
        frame = reader.next_frame()
        if frame is not None:
            got.append(frame)
    assert len(got) == 3 and reader.buffered == 0
    for bad in (b"\0\0\0\x0d", b"\xff\xff\xff\xff", b"\0\0\0\x0e\xeb\x51"):
        reader = FrameReader()
        reader.feed(bad)
        with pytest.raises(FramingError):
            reader.next_frame()


def price(name: str, seq: int, symbol: int = 1, tier: int = 0) -> Price:
    return Price(symbol, tier, seq, 1, 2, 5, snapshot=name == "PriceSnapshot")


def test_seq_tracker_follows_section_5() -> None:
    tracker = SeqTracker()
    assert tracker.apply(price("PriceSnapshot", 5)) == "snapshot"
    assert tracker.apply(price("PriceUpdate", 6)) == "ok"
    assert tracker.apply(price("PriceUpdate", 6)) == "old"
    assert tracker.apply(price("PriceUpdate", 9)) == "gap"
    assert tracker.gaps == [(1, 0, 7, 9)]
    assert tracker.apply(price("PriceSnapshot", 3)) == "snapshot"  # a snapshot always resets
    assert tracker.apply(price("PriceUpdate", 4)) == "ok"
    tracker.apply_snapshot_entry(price("PriceSnapshot", 2))  # never backwards
    assert tracker.apply(price("PriceUpdate", 5)) == "ok"
    assert tracker.apply(price("PriceUpdate", 1, tier=1)) == "ok"  # first of another tier
