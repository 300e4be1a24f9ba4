"""A throwaway certificate authority for tests: real X.509 certificates, made in the test."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path  # a client certificate signed by a different CA
    rogue_key: Path
    # more client certificates of the test CA: common name -> (certificate, key)
    clients: dict[str, tuple[Path, Path]] = field(default_factory=dict)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


def _write_cert(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, cn: str, *, server: bool
          ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(directory: Path, clients: tuple[str, ...] = ()) -> Pki:
    """A CA, a server certificate for 127.0.0.1/localhost, a client certificate, a client
    certificate from an unrelated CA, and one more client certificate per name in ``clients``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("c4 test CA")
    server, server_key = _leaf(ca, ca_key, "c4-daemon", server=True)
    client, client_key = _leaf(ca, ca_key, "c4-client", server=False)
    other, other_key = _ca("someone else's CA")
    rogue, rogue_key = _leaf(other, other_key, "c4-rogue", server=False)
    more = {}
    for cn in clients:
        cert, key = _leaf(ca, ca_key, cn, server=False)
        more[cn] = (_write_cert(cert, directory / f"client-{cn}.pem"),
                    _write_key(key, directory / f"client-{cn}-key.pem"))
    return Pki(ca=_write_cert(ca, directory / "ca.pem"),
               server_cert=_write_cert(server, directory / "server.pem"),
               server_key=_write_key(server_key, directory / "server-key.pem"),
               client_cert=_write_cert(client, directory / "client.pem"),
               client_key=_write_key(client_key, directory / "client-key.pem"),
               rogue_cert=_write_cert(rogue, directory / "rogue.pem"),
               rogue_key=_write_key(rogue_key, directory / "rogue-key.pem"), clients=more)
