"""How a broker authenticates to the other brokers of its cluster (Pulsar's
brokerClientAuthentication and brokerClientTrustCertsFilePath).

Peers call each other's Peer service, which needs a superuser role where
authorization is on: the token is `broker_client_token_file`'s, or, when the broker
holds the HS256 secret key, one it makes for its first superuser role. With TLS the
peer's certificate is checked against `broker_client_trust_certs_file`, else the
client CA the broker requires of clients, else the development CA `--secure` made
in the data dir; with client certificates required the broker presents its own.
Whatever is missing is refused at start with the key to set.
"""

from __future__ import annotations

from pathlib import Path

from stableline.broker.cluster.peers import PeerCredentials
from stableline.broker.config import BrokerConfig
from stableline.broker.security.settings import SecuritySettings
from stableline.broker.security.tokens import create_token, read_secret_key


def peer_credentials(config: BrokerConfig, settings: SecuritySettings) -> PeerCredentials:
    """ValueError naming the key to set when peers cannot be reached securely."""
    token = None
    if settings.authentication_enabled:
        if config.broker_client_token_file:
            token = Path(config.broker_client_token_file).read_text().strip()
            if not token:
                raise ValueError(
                    f"broker_client_token_file {config.broker_client_token_file} is empty"
                )
        elif settings.token_secret_key is not None and settings.superuser_roles:
            token = create_token(
                settings.superuser_roles[0], secret_key=read_secret_key(settings.token_secret_key)
            )
        else:
            raise ValueError(
                "brokers of a cluster with authentication call each other as a superuser "
                "role: set broker_client_token_file to a token of one of superuser_roles"
            )
    if settings.tls is None:
        return PeerCredentials(token=token)
    candidates = [
        config.broker_client_trust_certs_file,
        str(settings.tls.trust_certs_file or ""),
        str(config.data_dir / "security" / "ca.pem"),
    ]
    trust = next((Path(c) for c in candidates if c and Path(c).is_file()), None)
    if trust is None:
        raise ValueError(
            "brokers of a cluster with TLS check each other's certificates: set "
            "broker_client_trust_certs_file to the CA that signed the brokers' certificates"
        )
    cert_chain = private_key = None
    if settings.tls.trust_certs_file is not None:
        cert_chain = settings.tls.cert_file.read_bytes()
        private_key = settings.tls.key_file.read_bytes()
    return PeerCredentials(trust.read_bytes(), token, cert_chain, private_key)
