"""What a broker registration may say about where it is reached.

A registration is read by every broker (redirects, peers, placement) and shown on
the dashboard as a link, so its addresses are checked where they are written and
again where they are read: a gRPC or Kafka address is `HOST:PORT`, an HTTP URL is
`http://HOST:PORT` or `https://HOST:PORT` and nothing else (no user info, path,
query or fragment; no other scheme such as `javascript:`). HOST is a DNS name, an
IPv4 address or a bracketed IPv6 address.
"""

from __future__ import annotations

import re

from stableline.metadata.errors import MetadataStoreError

_HOST = r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252}))"
_HOST_PORT = re.compile(rf"{_HOST}:(\d{{1,5}})")
_HTTP_URL = re.compile(rf"https?://{_HOST}:(\d{{1,5}})")


class InvalidBrokerAddress(MetadataStoreError, ValueError):
    """A registration names an address no broker could have; the message says which."""


def check_host_port(what: str, address: str) -> str:
    """`address` if it is HOST:PORT, else InvalidBrokerAddress naming `what`."""
    match = _HOST_PORT.fullmatch(address)
    if match is None or not 0 < int(match.group(1)) < 65536:
        raise InvalidBrokerAddress(f"{what} {address!r} is not HOST:PORT")
    return address


def check_http_url(what: str, url: str) -> str:
    """`url` if it is http(s)://HOST:PORT, else InvalidBrokerAddress naming `what`."""
    match = _HTTP_URL.fullmatch(url)
    if match is None or not 0 < int(match.group(1)) < 65536:
        raise InvalidBrokerAddress(f"{what} {url!r} is not http://HOST:PORT or https://HOST:PORT")
    return url
