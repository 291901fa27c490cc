"""`stableline serve --secure`: TLS, authentication and authorization on with one flag.

Files the config does not name are made once under DATA_DIR/security and reused
on every later start: a development CA (ca.pem, the file clients trust), the
broker's certificate for localhost/127.0.0.1 and its own host name, an HS256
secret key, and, for the superuser role `admin`, a token (admin.token). A config
that names its own certificate, key or superusers keeps them. A broker of a cluster
refuses to start when its etcd answers clients without credentials
(metadata_store_require_authentication).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from stableline.broker.config import BrokerConfig
from stableline.broker.security.certificates import CertificateAuthority
from stableline.broker.security.tokens import create_secret_key, create_token, read_secret_key

DEFAULT_SUPERUSER = "admin"


@dataclass(frozen=True, slots=True)
class SecureSetup:
    config: BrokerConfig
    # What a person needs to connect: the CA to trust and a superuser token file.
    ca_file: Path | None
    superuser_token_file: Path | None


def _write_private(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


def _server_hosts(config: BrokerConfig) -> tuple[str, ...]:
    hosts = ["localhost", "127.0.0.1", "::1", socket.gethostname()]
    for address in (config.grpc_address, config.http_address):
        host = address.rpartition(":")[0].strip("[]")
        if host and host not in ("0.0.0.0", "::") and host not in hosts:
            hosts.append(host)
    return tuple(hosts)


def secure(config: BrokerConfig) -> SecureSetup:
    directory = config.data_dir / "security"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    changes: dict[str, object] = {
        "authentication_enabled": True,
        "authorization_enabled": True,
        # Grants live in the metadata store: one anyone can write would undo the rest.
        "metadata_store_require_authentication": True,
    }
    ca_file = None
    if not config.tls_cert_file:
        ca_file = directory / "ca.pem"
        cert_file, key_file = directory / "broker.pem", directory / "broker-key.pem"
        if not (ca_file.exists() and cert_file.exists() and key_file.exists()):
            authority = CertificateAuthority()
            server = authority.issue_server(_server_hosts(config))
            _write_private(key_file, server.key_pem)
            cert_file.write_bytes(server.cert_pem)
            ca_file.write_bytes(authority.cert_pem)
        changes.update(tls_cert_file=str(cert_file), tls_key_file=str(key_file))
    secret_key_file = None
    if not (config.token_secret_key or config.token_public_key):
        secret_key_file = directory / "secret.key"
        if not secret_key_file.exists():
            _write_private(secret_key_file, create_secret_key())
        changes["token_secret_key"] = str(secret_key_file)
    elif config.token_secret_key:
        secret_key_file = Path(config.token_secret_key)
    token_file = None
    if not config.superuser_roles:
        changes["superuser_roles"] = (DEFAULT_SUPERUSER,)
        if secret_key_file is not None:
            # Written on every start: the same key and claims make the same token.
            token_file = directory / "admin.token"
            token = create_token(DEFAULT_SUPERUSER, secret_key=read_secret_key(secret_key_file))
            _write_private(token_file, token.encode())
    return SecureSetup(dataclasses.replace(config, **changes), ca_file, token_file)
