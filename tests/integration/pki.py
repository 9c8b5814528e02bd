"""Certificates made at test time (openssl): a CA, a server certificate for
127.0.0.1/localhost and a client certificate, for the brokers and redis-servers the
secured tests start (deploy/kafka.sh, deploy/redis.sh)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d: Path) -> Pki:
    """The certificates, in ``d`` (keys mode 600)."""
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
        *("-keyout", "ca.key", "-out", "ca.pem"),
        *("-subj", "/CN=context-stream-test-CA"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        cwd=d,
    )
    for who in ("server", "client"):
        _openssl(
            *f"req -newkey rsa:2048 -nodes -keyout {who}.key -out {who}.csr".split(),
            *("-subj", f"/CN={who}"),
            cwd=d,
        )
        (d / f"{who}.ext").write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            f"extendedKeyUsage={'serverAuth' if who == 'server' else 'clientAuth'}\n"
            "basicConstraints=CA:FALSE\n"
        )
        _openssl(
            *f"x509 -req -in {who}.csr -CA ca.pem -CAkey ca.key -CAcreateserial".split(),
            *f"-out {who}.pem -days 2 -extfile {who}.ext".split(),
            cwd=d,
        )
    for key in d.glob("*.key"):
        key.chmod(0o600)
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")
