"""A small certificate authority for development and tests: a CA, server and client certs.

Production brokers use certificates from their own CA; this exists so that
`stableline serve --secure` and the test suite can run TLS with nothing prepared
(keys are made on the spot, never shipped).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True, slots=True)
class KeyAndCert:
    key_pem: bytes
    cert_pem: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    def __init__(self, common_name: str = "stableline development CA"):
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._name = _name(common_name)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue_server(self, hosts: tuple[str, ...] = ("localhost", "127.0.0.1")) -> KeyAndCert:
        """A server certificate valid for each of `hosts` (names or IP addresses)."""
        alternative_names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                alternative_names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                alternative_names.append(x509.DNSName(host))
        return self._issue(hosts[0], ExtendedKeyUsageOID.SERVER_AUTH, alternative_names)

    def issue_client(self, common_name: str) -> KeyAndCert:
        return self._issue(common_name, ExtendedKeyUsageOID.CLIENT_AUTH, [])

    def _issue(
        self, common_name: str, usage: x509.ObjectIdentifier, names: list[x509.GeneralName]
    ) -> KeyAndCert:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyAndCert(_key_pem(key), cert.public_bytes(serialization.Encoding.PEM))
