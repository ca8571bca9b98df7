"""Blocking-socket transport of the synchronous sessions, and a connector that never blocks
past the wait it is given.

:class:`Connector` opens a TCP connection (and a TLS session over it) in non-blocking steps:
each :meth:`Connector.poll` waits at most the time given, so a caller with its own timeout
(``Subscriber.next_event(0.5)``) is never held by a server that does not answer; the whole
connect is bounded by the connector's own ``timeout_s``. (Resolving a host name is the one
step that may block: give addresses, not names, where that matters.)

:class:`SocketTransport` moves bytes of an open socket: ``recv`` waits at most its timeout
and returns None when nothing came, ``send`` is bounded by ``send_timeout_s`` (a server
that stops reading is a lost connection, not a hung client). Both raise
:class:`~pricewire_client.errors.ConnectionLost` when the connection ends.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import ssl
from typing import Protocol

from .errors import ConnectFailed, ConnectionLost

SEND_TIMEOUT_S = 10.0
RECV_MAX = 1 << 16


class Transport(Protocol):
    """What a synchronous session needs from its connection."""

    def send(self, data: bytes) -> None:
        """Send all of ``data``; ConnectionLost if the connection ended."""

    def recv(self, timeout_s: float) -> bytes | None:
        """Bytes received within ``timeout_s`` (0: only what is there), None if none came;
        ConnectionLost on EOF or reset."""

    def close(self) -> None:
        """Close (idempotent)."""


class SocketTransport:
    """A :class:`Transport` over a connected (TLS or plain) socket."""

    def __init__(self, sock: socket.socket, send_timeout_s: float = SEND_TIMEOUT_S) -> None:
        self.sock = sock
        self.send_timeout_s = send_timeout_s
        self.closed = False

    def send(self, data: bytes) -> None:
        """Send all of ``data`` within ``send_timeout_s``."""
        try:
            self.sock.settimeout(self.send_timeout_s)
            self.sock.sendall(data)
        except TimeoutError as err:
            raise ConnectionLost(f"send blocked {self.send_timeout_s} s: peer not reading") from err
        except OSError as err:
            raise ConnectionLost(f"send failed: {err}") from err

    def recv(self, timeout_s: float) -> bytes | None:
        """Bytes within ``timeout_s``, None if none came."""
        try:
            self.sock.settimeout(max(timeout_s, 0.0))
            data = self.sock.recv(RECV_MAX)
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return None
        except OSError as err:  # reset, TLS alert, closed socket
            raise ConnectionLost(f"connection lost: {err}") from err
        if not data:
            raise ConnectionLost("EOF")
        return data

    def close(self) -> None:
        """Close the socket (idempotent)."""
        self.closed = True
        self.sock.close()


class Connector:
    """One connection attempt to (host, port) in non-blocking steps (see the module)."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float,
        now: float,
        *,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        rcvbuf: int | None = None,
    ) -> None:
        self.where = f"{host}:{port}"
        self.tls, self.server_hostname = tls, server_hostname or host
        self.timeout_s = timeout_s
        self.deadline = now + timeout_s
        try:
            family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[
                0
            ]
            self.sock = socket.socket(family, kind, proto)
        except OSError as err:
            raise ConnectFailed(self.where, str(err)) from err
        if rcvbuf is not None:  # before connect, so the window is negotiated with it
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.setblocking(False)
        code = self.sock.connect_ex(addr)
        if code not in (0, errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
            self._fail(os.strerror(code))
        self.handshaking = False

    def _fail(self, why: str, cause: BaseException | None = None) -> None:
        self.sock.close()
        raise ConnectFailed(self.where, why) from cause

    def poll(self, wait_s: float, now: float) -> socket.socket | None:
        """The connected socket (blocking mode) once ready, None while still connecting
        (after waiting at most ``wait_s``); ConnectFailed when it failed or timed out."""
        if now >= self.deadline:
            self._fail(f"timed out after {self.timeout_s:g} s")
        wait = max(min(wait_s, self.deadline - now), 0.0)
        if not self.handshaking:
            if not select.select([], [self.sock], [], wait)[1]:
                return None
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self._fail(os.strerror(code))
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is None:
                return self._done()
            self.sock = self.tls.wrap_socket(
                self.sock, server_hostname=self.server_hostname, do_handshake_on_connect=False
            )
            self.handshaking = True
        return self._handshake(wait)

    def _handshake(self, wait: float) -> socket.socket | None:
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            select.select([self.sock], [], [], wait)
            return None
        except ssl.SSLWantWriteError:
            select.select([], [self.sock], [], wait)
            return None
        except OSError as err:  # a certificate refused, an alert, a reset
            self._fail(f"TLS handshake: {err}", err)
        return self._done()

    def _done(self) -> socket.socket:
        self.sock.setblocking(True)
        return self.sock

    def close(self) -> None:
        """Abandon the attempt."""
        self.sock.close()
