"""Self-signed certificates (openssl), web config files and basic auth headers for TLS tests."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path


def make_certificate(directory: Path, name: str = "server") -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key: ``(NAME.crt, NAME.key)``."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={name}",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def write_web_config(
    path: Path,
    cert: Path | None = None,
    key: Path | None = None,
    users: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    *,
    client_ca: Path | None = None,
    allowed_spiffe_ids: list[str] | None = None,
    limits: dict[str, float] | None = None,
) -> Path:
    """An exporter-toolkit web config file; ``users`` maps names to bcrypt hashes. With
    *client_ca* clients must present a certificate it verifies (and, with
    *allowed_spiffe_ids*, one of those SPIFFE IDs); *limits* is ``connection_limits``."""
    lines: list[str] = []
    if cert is not None:
        lines += ["tls_server_config:", f"  cert_file: {cert}", f"  key_file: {key}"]
    if client_ca is not None:
        lines += [
            "  client_auth_type: RequireAndVerifyClientCert",
            f"  client_ca_file: {client_ca}",
        ]
    if allowed_spiffe_ids:
        lines += ["  allowed_spiffe_ids:", *(f"    - {i}" for i in allowed_spiffe_ids)]
    if limits:
        lines += ["connection_limits:", *(f"  {k}: {v}" for k, v in limits.items())]
    if users:
        lines += ["basic_auth_users:", *(f"  {user}: '{h}'" for user, h in users.items())]
    if headers:
        lines += ["http_server_config:", "  headers:"]
        lines += [f"    {name}: {value}" for name, value in headers.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def basic(user: str, password: str) -> dict[str, str]:
    """The ``Authorization`` header of HTTP basic auth."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}
