"""`etcd://` URLs: endpoints, credentials and TLS files for the etcd store.

    etcd://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...][?tls_trust_certs_file=CA
        [&tls_cert_file=CERT&tls_key_file=KEY]]

(Pulsar's `metadataStoreUrl=etcd:...` with its TLS settings). Any `tls_*` option, or
`tls=true`, turns TLS on; a trust file replaces the system's roots; a cert and key
authenticate this client to etcd. USER and PASSWORD are percent-decoded; messages
show the URL with the password left out (`redacted`). A password belongs in a file
or the environment, not the URL (a URL on a command line shows in `ps`): `USER@`
alone names the user, and `with_password` adds the password read elsewhere; a
password in the URL still works (`password_in_url` says so, for a warning).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field, replace

from stableline.metadata.errors import MetadataStoreError

SCHEME = "etcd"
_TLS_OPTIONS = ("tls_trust_certs_file", "tls_cert_file", "tls_key_file")


class InvalidMetadataStoreUrl(MetadataStoreError, ValueError):
    """The URL cannot name an etcd cluster; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class EtcdSettings:
    endpoints: tuple[tuple[str, int], ...]
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_trust_certs_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    password_in_url: bool = False

    def __post_init__(self) -> None:
        assert self.endpoints, "at least one endpoint"
        assert self.user is not None or self.password is None

    def with_password(self, password: str | None) -> EtcdSettings:
        """These settings with the password read from a file or the environment;
        InvalidMetadataStoreUrl when it cannot be used with this URL."""
        if password is None:
            if self.user is not None and self.password is None:
                raise InvalidMetadataStoreUrl(
                    f"metadata store URL {self.redacted} names user {self.user!r} but no "
                    f"password: give it in a file (--metadata-store-password-file, config "
                    f"metadata_store_password_file) or in STABLELINE_METADATA_STORE_PASSWORD"
                )
            return self
        if self.user is None:
            raise InvalidMetadataStoreUrl(
                f"a metadata store password is given but {self.redacted} names no user: "
                f"use etcd://USER@HOST:PORT"
            )
        if self.password is not None:
            raise InvalidMetadataStoreUrl(
                f"the metadata store password is given twice (in {self.redacted} and in a "
                f"file or the environment): leave it out of the URL"
            )
        return replace(self, password=password)

    @property
    def redacted(self) -> str:
        """The URL as messages show it: no password."""
        hosts = ",".join(f"{_host_text(host)}:{port}" for host, port in self.endpoints)
        user = ""
        if self.user:
            user = urllib.parse.quote(self.user, safe="") + (":***@" if self.password else "@")
        return f"{SCHEME}://{user}{hosts}"


def _host_text(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def parse_etcd_url(url: str) -> EtcdSettings:
    """Settings from an `etcd://` URL, or InvalidMetadataStoreUrl saying what is wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme != SCHEME:
        raise InvalidMetadataStoreUrl(
            f"metadata store URL {url!r} is not etcd://HOST:PORT[,HOST:PORT...]"
        )
    authority, _, query = rest.partition("?")
    authority = authority.rstrip("/")
    user = password = None
    if "@" in authority:
        credentials, _, authority = authority.rpartition("@")
        raw_user, has_password, raw_password = credentials.partition(":")
        if not raw_user or (has_password and not raw_password):
            raise InvalidMetadataStoreUrl(
                "metadata store URL: credentials must be USER@ (the password read from a "
                "file or the environment) or USER:PASSWORD@"
            )
        user = urllib.parse.unquote(raw_user)
        password = urllib.parse.unquote(raw_password) if has_password else None
    endpoints = tuple(_endpoint(part.strip()) for part in authority.split(",") if part.strip())
    if not endpoints:
        raise InvalidMetadataStoreUrl(
            f"metadata store URL etcd://{authority} names no HOST:PORT endpoint"
        )
    options = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    unknown = set(options) - {*_TLS_OPTIONS, "tls"}
    if unknown:
        raise InvalidMetadataStoreUrl(
            f"metadata store URL: unknown option(s) {', '.join(sorted(unknown))}; "
            f"known: tls, {', '.join(_TLS_OPTIONS)}"
        )
    files = {name: options.get(name) or None for name in _TLS_OPTIONS}
    if (files["tls_cert_file"] is None) != (files["tls_key_file"] is None):
        raise InvalidMetadataStoreUrl(
            "metadata store URL: tls_cert_file and tls_key_file go together"
        )
    tls = options.get("tls", "").lower() in ("1", "true", "yes", "on") or any(files.values())
    return EtcdSettings(
        endpoints, user, password, tls, **files, password_in_url=password is not None
    )


def _endpoint(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidMetadataStoreUrl(f"metadata store URL: {text!r} is not HOST:PORT")
    return host, int(port)
