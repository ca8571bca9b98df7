"""The exceptions of pricewire_client: one hierarchy under :class:`PricewireError`.

::

    PricewireError
    ├── ProtocolError            the peer broke the protocol; the stream is unusable
    │   └── CodecError           a frame that cannot be decoded
    │       ├── FramingError     a SOFH that loses the framing (length, encoding type)
    │       ├── MalformedError   valid framing, a body too short or inconsistent
    │       └── UnknownTemplateError
    ├── RefusedError             the server said no: ``.reason`` (name), ``.retry_after`` (s)
    │   ├── LogonRefused         LogonRejected, or Disconnect/Reject instead of LogonAccepted
    │   └── RequestRejected      a Reject answering one request
    ├── ConnectionLost           no usable connection: reset, EOF, Disconnect, dead peer
    │   │                        (also a :class:`ConnectionError`)
    │   └── ConnectFailed        it could not be made: refused, timed out, TLS refused
    └── RequestTimeout           no answer within the caller's timeout (also a
                                 :class:`TimeoutError`)

``ConnectionClosed`` is the old name of :class:`ConnectionLost`. Reason names are the
lower-case enum names of protocol.md (``"session_limit"``, ``"rate_limited"``); a value
this client does not know (enums are open, §1) is named ``"unknown(N)"``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the message classes import nothing from here at run time
    from .model import Disconnect, LogonRejected, Reject


class PricewireError(Exception):
    """The base class of every error this package raises."""


class ProtocolError(PricewireError):
    """The peer broke the protocol (the connection cannot go on), or a frame is unreadable."""


class CodecError(ProtocolError):
    """A frame or stream that cannot be decoded."""


class MalformedError(CodecError):
    """Valid framing, but a body that is too short or inconsistent."""


class UnknownTemplateError(CodecError):
    """A template id this schema does not define."""

    def __init__(self, template_id: int) -> None:
        super().__init__(f"unknown template {template_id}")
        self.template_id = template_id


class FramingError(CodecError):
    """A SOFH that loses the framing (length out of range, wrong encoding type)."""


def reason_name(enum: type[IntEnum], value: int) -> str:
    """The protocol's name of an enum value (``"rate_limited"``), or ``"unknown(N)"``."""
    try:
        return enum(value).name.lower()
    except ValueError:
        return f"unknown({value})"


class RefusedError(PricewireError):
    """The server refused: ``reason`` is the reason's name, ``code`` its number,
    ``retry_after`` the server's floor in seconds before trying again (0.0 = none)."""

    def __init__(self, what: str, reason: str, code: int, retry_after_ms: int, text: str) -> None:
        self.reason = reason
        self.code = code
        self.retry_after = retry_after_ms / 1000
        self.text = text
        detail = f"{what}: {reason}"
        if retry_after_ms:
            detail += f", retry after {self.retry_after:.3f} s"
        if text:
            detail += f" ({text!r})"
        super().__init__(detail)


class LogonRefused(RefusedError):
    """The logon was answered with LogonRejected, Disconnect or Reject; ``answer`` is it."""

    def __init__(self, answer: LogonRejected | Disconnect | Reject) -> None:
        from .model import Disconnect, LogonRejected  # a cycle at import time otherwise

        text = "" if isinstance(answer, LogonRejected) else answer.text
        what = (
            "logon refused"
            if isinstance(answer, LogonRejected)
            else "logon ended by Disconnect"
            if isinstance(answer, Disconnect)
            else "logon rejected"
        )
        super().__init__(what, answer.reason_name, int(answer.reason), answer.retry_after_ms, text)
        self.answer = answer


class RequestRejected(RefusedError):
    """A request was answered with Reject; ``answer`` is it, ``request_id`` the request's."""

    def __init__(self, answer: Reject) -> None:
        what = f"request {answer.request_id} rejected"
        super().__init__(
            what, answer.reason_name, int(answer.reason), answer.retry_after_ms, answer.text
        )
        self.answer = answer
        self.request_id = answer.request_id
        self.ref_template_id = answer.ref_template_id


class ConnectionLost(PricewireError, ConnectionError):
    """No usable connection: it could not be made, or it ended (EOF, reset, Disconnect, a
    dead peer). ``disconnect`` is the server's Disconnect when one came first (its reason
    in ``reason``, its floor in ``retry_after`` seconds)."""

    def __init__(self, detail: str, disconnect: Disconnect | None = None) -> None:
        self.disconnect = disconnect
        self.reason = disconnect.reason_name if disconnect is not None else ""
        self.retry_after = disconnect.retry_after_ms / 1000 if disconnect is not None else 0.0
        super().__init__(detail)


ConnectionClosed = ConnectionLost
"""The old name of :class:`ConnectionLost`."""


class ConnectFailed(ConnectionLost):
    """A connection could not be made (refused, unreachable, timed out, TLS handshake
    refused); ``where`` is ``host:port``, ``why`` the cause in words."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"connect to {where} failed: {why}")
        self.where, self.why = where, why


class RequestTimeout(PricewireError, TimeoutError):
    """No answer (to a logon or a request) within the caller's timeout."""
