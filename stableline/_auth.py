"""Client credentials: a bearer token for every call, and TLS for the channel.

`AuthenticationToken("eyJ...")`, or a function returning the current token (read
again for each call, so a token refreshed on disk is picked up), as Pulsar's. When
the broker ends an open producer or consumer stream because its token expired, a
function is asked again and the stream reopened with what it gives (Pulsar's
clients re-read their AuthenticationDataProvider on the broker's auth challenge);
a fixed token, or a function giving the refused token again, ends the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc


class AuthenticationToken:
    def __init__(self, token: str | Callable[[], str]):
        if not callable(token) and not (isinstance(token, str) and token.strip()):
            raise ValueError("AuthenticationToken needs a token string or a function returning one")
        self._token = token

    @property
    def refreshable(self) -> bool:
        """A function gives the token: asked again, it may give a fresh one."""
        return callable(self._token)

    def token(self) -> str:
        value = self._token() if callable(self._token) else self._token
        return value.strip()

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return bearer_metadata(self.token())


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying `token`."""
    return (("authorization", f"Bearer {token}"),)


def channel_credentials(
    trust_certs_file: str | Path | None = None,
    certificate_file: str | Path | None = None,
    private_key_file: str | Path | None = None,
) -> grpc.ChannelCredentials:
    """TLS credentials: the broker's CA (system roots when None) and an optional client cert."""
    if (certificate_file is None) != (private_key_file is None):
        raise ValueError("a client certificate needs both its certificate and private key file")

    def read(path: str | Path | None) -> bytes | None:
        return Path(path).read_bytes() if path is not None else None

    return grpc.ssl_channel_credentials(
        root_certificates=read(trust_certs_file),
        private_key=read(private_key_file),
        certificate_chain=read(certificate_file),
    )
