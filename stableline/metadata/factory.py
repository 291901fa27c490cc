"""open_metadata_store(url): the implementation its scheme names.

"" (or None): the embedded store in `embedded_dir`; `etcd://...`: etcd. Anything
else is InvalidMetadataStoreUrl, before anything is opened. An etcd password comes
as `password` (read by the caller from a file or the environment) for a URL naming
`USER@`; one in the URL itself still works but is logged as a WARNING, since a URL
on a command line shows in `ps`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from stableline.metadata.embedded import EmbeddedMetadataStore
from stableline.metadata.etcd_url import InvalidMetadataStoreUrl, parse_etcd_url
from stableline.metadata.store import ClusterMetadataStore

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_S = 30.0


async def open_metadata_store(
    url: str | None,
    *,
    embedded_dir: Path | None = None,
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
    operation_timeout_s: float | None = None,
    connect_timeout_s: float | None = None,
    password: str | None = None,
) -> ClusterMetadataStore:
    """Open the store `url` names; MetadataStoreUnavailable (naming it) if it cannot."""
    if not url:
        if embedded_dir is None:
            raise InvalidMetadataStoreUrl("the embedded metadata store needs a directory")
        return EmbeddedMetadataStore(embedded_dir)
    if url.startswith("etcd:"):
        from stableline.metadata.etcd import EtcdMetadataStore

        timeouts = {}
        if operation_timeout_s is not None:
            timeouts["operation_timeout_s"] = operation_timeout_s
        if connect_timeout_s is not None:
            timeouts["connect_timeout_s"] = connect_timeout_s
        settings = parse_etcd_url(url).with_password(password)
        if settings.password_in_url:
            log.warning(
                "the etcd password is in the metadata store URL, where `ps` and the "
                "shell's history show it: give it in a file (--metadata-store-password-"
                "file) or in STABLELINE_METADATA_STORE_PASSWORD, and the URL as "
                "etcd://%s@HOST:PORT",
                settings.user,
            )
        return await EtcdMetadataStore.open(
            settings, session_timeout_s=session_timeout_s, **timeouts
        )
    raise InvalidMetadataStoreUrl(
        f"metadata store URL {url!r}: unknown scheme; use etcd://HOST:PORT[,HOST:PORT...] "
        f"or leave it empty for the embedded store in the data dir"
    )
