"""The security part of the broker config, checked once before the broker starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stableline.broker.config import BrokerConfig
from stableline.broker.security.tokens import read_secret_key


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert_file: Path
    key_file: Path
    # Client CA: when set, clients must present a certificate it signed.
    trust_certs_file: Path | None


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    tls: TlsFiles | None
    authentication_enabled: bool
    token_secret_key: Path | None
    token_public_key: Path | None
    authorization_enabled: bool
    superuser_roles: tuple[str, ...]
    # Pulsar's authenticateMetricsEndpoint: /metrics needs a valid token (any role).
    authenticate_metrics_endpoint: bool = False
    # Pulsar's authenticationRefreshCheckSeconds: open streams' tokens checked this often.
    authentication_refresh_check_seconds: float = 60.0

    @classmethod
    def from_config(cls, config: BrokerConfig) -> SecuritySettings:
        """Refuses combinations that would look secure but are not, with what to fix."""
        cert, key, trust = config.tls_cert_file, config.tls_key_file, config.tls_trust_certs_file
        tls = None
        if cert or key:
            if not (cert and key):
                raise ValueError("TLS needs both tls_cert_file and tls_key_file")
            tls = TlsFiles(Path(cert), Path(key), Path(trust) if trust else None)
        elif trust:
            raise ValueError("tls_trust_certs_file needs tls_cert_file and tls_key_file")
        secret = Path(config.token_secret_key) if config.token_secret_key else None
        public = Path(config.token_public_key) if config.token_public_key else None
        if config.authentication_enabled and (secret is None) == (public is None):
            raise ValueError(
                "authentication_enabled needs exactly one of token_secret_key (HS256) "
                "or token_public_key (RS256)"
            )
        if config.authorization_enabled and not config.authentication_enabled:
            raise ValueError("authorization_enabled needs authentication_enabled")
        files = [p for p in (secret, public) if p is not None]
        if tls is not None:
            files += [tls.cert_file, tls.key_file]
            files += [tls.trust_certs_file] if tls.trust_certs_file else []
        for path in files:
            if not path.is_file():
                raise ValueError(f"security file {path} does not exist")
        if secret is not None:
            read_secret_key(secret)  # ValueError naming the file: empty or too short
        if config.authenticate_metrics_endpoint and not config.authentication_enabled:
            raise ValueError("authenticate_metrics_endpoint needs authentication_enabled")
        if not config.authentication_refresh_check_seconds > 0:
            raise ValueError(
                "authentication_refresh_check_seconds must be > 0, got "
                f"{config.authentication_refresh_check_seconds}"
            )
        return cls(
            tls=tls,
            authentication_enabled=config.authentication_enabled,
            token_secret_key=secret,
            token_public_key=public,
            authorization_enabled=config.authorization_enabled,
            superuser_roles=tuple(config.superuser_roles),
            authenticate_metrics_endpoint=config.authenticate_metrics_endpoint,
            authentication_refresh_check_seconds=config.authentication_refresh_check_seconds,
        )
