"""A test SPIFFE CA (``cryptography``): trust bundles and X.509-SVIDs for TLS tests.

:func:`make_ca` makes a trust domain's CA (its certificate is the bundle, PEM);
:meth:`SpiffeCA.issue` writes a leaf certificate and key signed by it: an X.509-SVID with
one URI SAN when given a SPIFFE ID, with ``127.0.0.1``/``localhost`` SANs for a server,
valid from *not_before* to *not_after* (now and one day by default).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


@dataclass
class SpiffeCA:
    trust_domain: str
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    #: the CA certificate as a PEM file: the trust bundle
    bundle: Path

    def issue(
        self,
        directory: Path,
        name: str,
        spiffe_id: str | None = None,
        *,
        server: bool = False,
        not_before: dt.datetime | None = None,
        not_after: dt.datetime | None = None,
    ) -> tuple[Path, Path]:
        """``(NAME.crt, NAME.key)`` in *directory*."""
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = []
        if spiffe_id:
            sans.append(x509.UniformResourceIdentifier(spiffe_id))
        if server:
            sans += [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        start = not_before or _now() - dt.timedelta(minutes=5)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(not_after or start + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)
        return cert_path, key_path


def make_ca(directory: Path, trust_domain: str = "zurich.example") -> SpiffeCA:
    """A CA for *trust_domain*; its bundle is ``DIRECTORY/bundle.pem``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{trust_domain} test CA")])
    start = _now() - dt.timedelta(hours=1)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    bundle = directory / "bundle.pem"
    bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return SpiffeCA(trust_domain, cert, key, bundle)
