"""`stableline admin` and redirects: the token goes to the origin it was given for only.

A broker (here a small aiohttp server standing in for one) answering 307 elsewhere
must not get the CLI to send `Authorization: Bearer ...` to another host or port, nor
from https to plaintext http (curl -L keeps credentials the same way).
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from .conftest import Pki

TOKEN = "secret-admin-token"
SELF = "self"  # redirect_to: the same server, under /moved


@dataclass
class Server:
    url: str
    seen: list[dict[str, str]] = field(default_factory=list)


class Servers:
    """aiohttp servers on their own loop in a thread; each records the headers it got."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runners: list[web.AppRunner] = []

    def start(self, redirect_to: str | None = None, tls: ssl.SSLContext | None = None) -> Server:
        return asyncio.run_coroutine_threadsafe(self._start(redirect_to, tls), self.loop).result(10)

    async def _start(self, redirect_to: str | None, tls: ssl.SSLContext | None) -> Server:
        server = Server("")

        async def handle(request: web.Request) -> web.StreamResponse:
            server.seen.append(dict(request.headers))
            if redirect_to == SELF and not request.path.startswith("/moved"):
                raise web.HTTPTemporaryRedirect(server.url + "/moved" + request.path_qs)
            if redirect_to is not None and redirect_to != SELF:
                raise web.HTTPTemporaryRedirect(redirect_to + request.path_qs)
            return web.json_response(["persistent://public/default/t"])

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        self.runners.append(runner)
        port = runner.addresses[0][1]
        server.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        return server

    def close(self) -> None:
        async def stop() -> None:
            for runner in self.runners:
                await runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def servers() -> Iterator[Servers]:
    running = Servers()
    try:
        yield running
    finally:
        running.close()


def _tls(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert_file, pki.server_key_file)
    return context


def _admin(url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stableline", "admin", "topics", "list", "--admin-url", url, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_redirect_from_https_to_http_elsewhere_never_carries_the_token(servers, pki):
    attacker = servers.start()
    broker = servers.start(redirect_to=attacker.url, tls=_tls(pki))
    result = _admin(broker.url, "--token", TOKEN, "--tls-trust-certs-file", str(pki.ca_file))
    assert result.returncode == 1
    assert "not sent" in result.stderr and attacker.url in result.stderr, result.stderr
    assert [h.get("Authorization") for h in broker.seen] == [f"Bearer {TOKEN}"]
    assert all(TOKEN not in str(h) for h in attacker.seen)


def test_a_redirect_to_another_port_never_carries_the_token(servers):
    other = servers.start()
    broker = servers.start(redirect_to=other.url)
    result = _admin(broker.url, "--token", TOKEN)
    assert result.returncode == 1 and f"--admin-url {other.url}" in result.stderr
    assert all(TOKEN not in str(h) for h in other.seen)


def test_a_redirect_within_the_origin_keeps_the_token(servers):
    broker = servers.start(redirect_to=SELF)
    result = _admin(broker.url, "--token", TOKEN)
    assert result.returncode == 0, result.stderr
    assert [h.get("Authorization") for h in broker.seen] == [f"Bearer {TOKEN}"] * 2


def test_without_a_token_a_redirect_elsewhere_is_followed(servers):
    owner = servers.start()
    broker = servers.start(redirect_to=owner.url)
    result = _admin(broker.url)
    assert result.returncode == 0, result.stderr
    assert len(owner.seen) == 1
