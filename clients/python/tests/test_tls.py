"""TLS on both listeners (docs/tls.md): a subscriber and a provider connect with
:mod:`ssl` against a chain made here with the ``openssl`` command, prices flow, and a
client trusting another CA is refused during the handshake."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from pricewire_client import ConnectFailed, Quote

from helpers import deadline_poll, new_provider, new_session, quote_until, release
from server import Server


def openssl(*args: str, cwd: Path) -> None:
    """Run one ``openssl`` command (bounded), failing the test on an error."""
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_ca(tmp: Path, name: str) -> Path:
    """A self-signed CA certificate and key: ``name.pem``, ``name.key``."""
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
        "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign",
        cwd=tmp,
    )  # fmt: skip
    return tmp / f"{name}.pem"


def make_server_cert(tmp: Path, ca: str) -> tuple[Path, Path]:
    """A leaf for 127.0.0.1 signed by ``ca``: (chain, key)."""
    (tmp / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
    )
    openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1",
        cwd=tmp,
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf",
        cwd=tmp,
    )  # fmt: skip
    return tmp / "server.pem", tmp / "server.key"


def test_subscriber_and_provider_over_tls(tmp_path: Path, api: str) -> None:
    ca = make_ca(tmp_path, "ca")
    other = make_ca(tmp_path, "other")
    cert, key = make_server_cert(tmp_path, "ca")
    srv = Server(tmp_path, ["--tls-cert", str(cert), "--tls-key", str(key)])
    try:
        trust = ssl.create_default_context(cafile=str(ca))
        prov = new_provider("127.0.0.1", srv.feed_port, tls=trust)
        prov.logon(0, "demo-feed")
        sess = new_session("127.0.0.1", srv.port, tls=trust)
        sess.logon()
        assert sess.subscribe([0]).name == "SubscribeResponse"
        prov.quote([Quote(0, 108_000, 108_010)])
        quote_until(sess, prov, Quote(0, 108_001, 108_011), "PriceUpdate")
        release(sess)
        release(prov)
        with pytest.raises(ConnectFailed) as err:
            new_session("127.0.0.1", srv.port, tls=ssl.create_default_context(cafile=str(other)))
        assert isinstance(err.value.__cause__, ssl.SSLCertVerificationError), err.value
        assert "certificate verify failed" in str(err.value)
        assert srv.metric("pricewire_tls_handshakes_total") >= 2
        # The blocking client sends its alert; asyncio closes without one (a reset or EOF
        # to the server): either way the refusal is counted.
        refused = (
            'pricewire_tls_handshake_failures_total{listener="subscriber",reason="peer_alert"}'
            if api == "sync"
            else 'pricewire_tls_handshake_failures_total{listener="subscriber"'
        )
        assert deadline_poll(lambda: srv.metric(refused) >= 1, 5.0), "the refusal is counted"
    finally:
        srv.stop()
