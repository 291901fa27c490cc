"""TLS on the etcd that `stableline cluster up` runs: a CA made for the cluster, a
server certificate for 127.0.0.1/localhost, and a client certificate for the
brokers (etcd asks every client for one: `--client-cert-auth`).

`certificates(directory)` makes them once under DIRECTORY/tls (keys 0600; the CA's
own key is not kept, so nothing else can be signed by it later) and returns the
files every later start reuses, in the shape EtcdProcess takes. `store_url_options`
is the query a broker's `etcd://` URL carries to use them.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from stableline.broker.security.certificates import CertificateAuthority

CLIENT_NAME = "stableline-broker"
_FILES = ("ca", "cert", "key", "client_cert", "client_key")


def _write(path: Path, data: bytes, private: bool) -> None:
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644
    )
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def certificates(directory: Path) -> dict[str, Path]:
    """{"ca", "cert", "key", "client_cert", "client_key"}: made the first time."""
    tls = directory / "tls"
    files = {name: tls / f"{name.replace('_', '-')}.pem" for name in _FILES}
    if all(path.exists() for path in files.values()):
        return files
    tls.mkdir(parents=True, exist_ok=True, mode=0o700)
    authority = CertificateAuthority("stableline cluster up etcd CA")
    server = authority.issue_server(("localhost", "127.0.0.1"))
    client = authority.issue_client(CLIENT_NAME)
    # Keys before certificates, the CA last: a start cut short makes them all again.
    _write(files["key"], server.key_pem, private=True)
    _write(files["client_key"], client.key_pem, private=True)
    _write(files["cert"], server.cert_pem, private=False)
    _write(files["client_cert"], client.cert_pem, private=False)
    _write(files["ca"], authority.cert_pem, private=False)
    return files


def store_url_options(files: dict[str, Path]) -> str:
    """The `?...` of a broker's etcd:// URL: trust the CA, present the client cert."""
    return "?" + urllib.parse.urlencode(
        {
            "tls_trust_certs_file": str(files["ca"]),
            "tls_cert_file": str(files["client_cert"]),
            "tls_key_file": str(files["client_key"]),
        }
    )
