"""SOFH framing and SBE encode/decode of every pricewire message.

Contract: ``encode`` turns a :class:`Message` into one complete frame (SOFH included);
``decode`` turns one complete frame back, honouring the wire's ``blockLength`` of the root
block and of every group entry (unknown trailing bytes are skipped, a block shorter than
the first version's is :class:`MalformedError`, a field beyond the block, one a later
version added, is absent from ``fields``). :class:`FrameReader`
splits a byte stream into frames and refuses a stream whose length or encoding type is
wrong as soon as those bytes arrive, before the body. No function here touches a socket or
a clock.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from . import schema
from .errors import CodecError, FramingError, MalformedError, UnknownTemplateError
from .schema import Field, MessageSpec

__all__ = [
    "CodecError",
    "FrameReader",
    "FramingError",
    "MalformedError",
    "Message",
    "UnknownTemplateError",
    "Value",
    "check_sofh",
    "decode",
    "encode",
    "encode_body",
    "header",
    "raw_frame",
    "sofh",
]

Value = int | str


@dataclass
class Message:
    """A decoded (or to-be-encoded) message.

    ``fields`` holds the root block's fields by schema name (a field the sender's block does
    not carry is absent); ``groups`` each group's entries (dicts by field name);
    ``data`` each var data field as bytes. Name16 fields are ``str`` (NUL padding removed).
    ``block_length``/``version``/``schema_id`` are the header's values as received (encode
    uses the schema's unless overridden).
    """

    name: str
    fields: dict[str, Value] = field(default_factory=dict)
    groups: dict[str, list[dict[str, Value]]] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    block_length: int | None = None
    version: int = schema.SCHEMA_VERSION
    schema_id: int = schema.SCHEMA_ID

    @property
    def template_id(self) -> int:
        """The schema's template id of this message."""
        return schema.spec(self.name).template_id

    def __getitem__(self, key: str) -> Value:
        return self.fields[key]

    def get(self, key: str, default: Value = 0) -> Value:
        """A root field, or ``default`` when absent."""
        return self.fields.get(key, default)

    def int(self, key: str) -> int:
        """A root field known to be an integer."""
        value = self.fields[key]
        assert isinstance(value, int), key
        return value

    def text(self, key: str) -> str:
        """A var data field decoded as UTF-8 (errors replaced)."""
        return self.data.get(key, b"").decode("utf-8", "replace")


def _put(buf: bytearray, base: int, fld: Field, value: Value) -> None:
    fmt = "<" + schema.PRIMITIVES[fld.kind][0]
    if fld.kind == "name16":
        raw = value.encode("ascii") if isinstance(value, str) else bytes(value)
        if len(raw) > schema.NAME_LEN:
            raise ValueError(f"{fld.name}: name longer than 16 bytes")
        struct.pack_into(fmt, buf, base + fld.offset, raw)
    else:
        struct.pack_into(fmt, buf, base + fld.offset, int(value))


def _get(buf: bytes | memoryview, base: int, fld: Field) -> Value:
    (value,) = struct.unpack_from("<" + schema.PRIMITIVES[fld.kind][0], buf, base + fld.offset)
    if fld.kind == "name16":
        return bytes(value).split(b"\0", 1)[0].decode("ascii", "replace")
    return int(value)


def _block(fields: tuple[Field, ...], length: int, values: dict[str, Value]) -> bytearray:
    buf = bytearray(length)
    for fld in fields:
        if fld.offset + fld.size <= length:
            _put(buf, 0, fld, values.get(fld.name, 0))
    return buf


def sofh(length: int, encoding: int = schema.SBE_ENCODING) -> bytes:
    """The 6-byte Simple Open Framing Header (big-endian)."""
    return struct.pack(">IH", length, encoding)


def header(block_length: int, template_id: int, schema_id: int, version: int) -> bytes:
    """The 8-byte SBE message header (little-endian)."""
    return struct.pack("<HHHH", block_length, template_id, schema_id, version)


def raw_frame(
    template_id: int,
    body: bytes,
    block_length: int,
    *,
    schema_id: int = schema.SCHEMA_ID,
    version: int = schema.SCHEMA_VERSION,
    encoding: int = schema.SBE_ENCODING,
    length: int | None = None,
) -> bytes:
    """A frame from parts, for tests that must send what the encoder would refuse."""
    total = schema.FRAME_LEN_MIN + len(body) if length is None else length
    return sofh(total, encoding) + header(block_length, template_id, schema_id, version) + body


def encode_body(msg: Message) -> tuple[MessageSpec, int, bytes]:
    """The spec, block length and SBE body (after the header) of ``msg``."""
    spc = schema.spec(msg.name)
    block_length = spc.block_length if msg.block_length is None else msg.block_length
    out = bytearray(_block(spc.fields, block_length, msg.fields))
    for grp in spc.groups:
        entries = msg.groups.get(grp.name, [])
        out += struct.pack("<HH", grp.block_length, len(entries))
        for entry in entries:
            out += _block(grp.fields, grp.block_length, entry)
    for name in spc.data:
        raw = msg.data.get(name, b"")
        if len(raw) > 255:
            raise ValueError(f"{name}: var data longer than 255 bytes")
        out += bytes([len(raw)]) + raw
    return spc, block_length, bytes(out)


def encode(msg: Message) -> bytes:
    """One complete frame for ``msg``."""
    spc, block_length, body = encode_body(msg)
    return raw_frame(
        spc.template_id, body, block_length, schema_id=msg.schema_id, version=msg.version
    )


def check_sofh(buf: bytes | bytearray | memoryview, max_len: int, start: int = 0) -> int | None:
    """The length of the frame at ``start`` if its SOFH is readable and valid, None if
    incomplete.

    Raises :class:`FramingError` as soon as the length (4 bytes) or the encoding type
    (6 bytes) is known to be wrong.
    """
    if len(buf) - start < 4:
        return None
    (length,) = struct.unpack_from(">I", buf, start)
    if length < schema.FRAME_LEN_MIN or length > max_len:
        raise FramingError(f"frame length {length} outside {schema.FRAME_LEN_MIN}..{max_len}")
    if len(buf) - start < schema.SOFH_LEN:
        return None
    (encoding,) = struct.unpack_from(">H", buf, start + 4)
    if encoding != schema.SBE_ENCODING:
        raise FramingError(f"encoding type 0x{encoding:04X} is not 0xEB50")
    return int(length)


def _read_groups(spc: MessageSpec, view: memoryview, pos: int, msg: Message) -> int:
    for grp in spc.groups:
        if pos + 4 > len(view):
            raise MalformedError(f"{spc.name}.{grp.name}: group header truncated")
        entry_len, count = struct.unpack_from("<HH", view, pos)
        pos += 4
        if entry_len < grp.block_length:
            raise MalformedError(f"{spc.name}.{grp.name}: entry length {entry_len} too short")
        if pos + entry_len * count > len(view):
            raise MalformedError(f"{spc.name}.{grp.name}: entries truncated")
        msg.groups[grp.name] = [
            {f.name: _get(view, pos + i * entry_len, f) for f in grp.fields} for i in range(count)
        ]
        pos += entry_len * count
    return pos


def _read_data(spc: MessageSpec, view: memoryview, pos: int, msg: Message) -> None:
    for name in spc.data:
        if pos >= len(view):
            raise MalformedError(f"{spc.name}.{name}: var data length missing")
        n = view[pos]
        if pos + 1 + n > len(view):
            raise MalformedError(f"{spc.name}.{name}: var data truncated")
        msg.data[name] = bytes(view[pos + 1 : pos + 1 + n])
        pos += 1 + n


def decode(frame: bytes | bytearray | memoryview) -> Message:
    """Decode one complete frame (SOFH included). Trailing bytes are ignored."""
    view = memoryview(frame)
    length = check_sofh(view, schema.SERVER_FRAME_LEN_MAX)
    if length is None or len(view) < length:
        raise MalformedError("incomplete frame")
    view = view[:length]
    block_length, template_id, schema_id, version = struct.unpack_from("<HHHH", view, 6)
    if schema_id != schema.SCHEMA_ID:
        raise CodecError(f"unknown schema 0x{schema_id:04X}")
    if version < 1:
        raise CodecError(f"unsupported version {version}")
    spc = schema.BY_TEMPLATE.get(template_id)
    if spc is None:
        raise UnknownTemplateError(template_id)
    if block_length < spc.min_block_length or schema.FRAME_LEN_MIN + block_length > length:
        raise MalformedError(f"{spc.name}: root block {block_length} bytes")
    base = schema.FRAME_LEN_MIN
    msg = Message(spc.name, block_length=block_length, version=version, schema_id=schema_id)
    msg.fields = {f.name: _get(view, base, f) for f in spc.fields if f.present(block_length)}
    pos = _read_groups(spc, view, base + block_length, msg)
    _read_data(spc, view, pos, msg)
    return msg


class FrameReader:
    """Splits a received byte stream into frames.

    Bounded: it holds at most one frame of ``max_frame_len`` bytes plus what one ``feed``
    brought. The SOFH is checked as soon as its bytes are there (see :func:`check_sofh`).
    Frames are cut at a read offset and the consumed bytes dropped once the buffer is
    drained (or past ``COMPACT_AFTER`` bytes): deleting each frame from the front of the
    buffer would move the rest of a 64 KiB read once per frame.
    """

    COMPACT_AFTER = 1 << 16

    def __init__(self, max_frame_len: int = schema.SERVER_FRAME_LEN_MAX) -> None:
        self._buf = bytearray()
        self._start = 0
        self._max = max_frame_len

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        if self._start >= self.COMPACT_AFTER:
            del self._buf[: self._start]
            self._start = 0
        self._buf += data

    def next_frame(self) -> bytes | None:
        """The next complete frame, or None until more bytes arrive."""
        start = self._start
        length = check_sofh(self._buf, self._max, start)
        if length is None or len(self._buf) - start < length:
            return None
        frame = bytes(self._buf[start : start + length])
        self._start = start + length
        if self._start == len(self._buf):
            self._buf.clear()
            self._start = 0
        return frame

    @property
    def buffered(self) -> int:
        """Bytes held that are not yet a complete frame."""
        return len(self._buf) - self._start
