"""The dashboard at GET /, against a real broker: its page and assets over HTTP, and what
an operator sees in a real headless Chromium when a READ_COMMITTED subscription stalls
behind an open transaction. Screenshots go to test-artifacts/dashboard/ (git-ignored).
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from stableline import InitialPosition, IsolationLevel

ARTIFACTS = Path(__file__).resolve().parents[4] / "test-artifacts" / "dashboard"
TOPIC = "persistent://public/default/payments"
WAIT_S = 15.0


def _fetch(broker, path: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(broker.http_url + path, timeout=10) as response:
        return response.headers.get_content_type(), response.read()


def test_root_serves_the_page_and_its_assets_from_the_broker_itself(broker):
    content_type, page = _fetch(broker, "/")
    assert content_type == "text/html"
    assets = re.findall(rb'(?:src|href)="(/dashboard/static/[^"]+)"', page)
    assert sorted(assets) == [
        b"/dashboard/static/app.js",
        b"/dashboard/static/favicon.svg",
        b"/dashboard/static/style.css",
    ]
    types = {}
    for asset in assets:
        types[asset], body = _fetch(broker, asset.decode())
        # Nothing is loaded from elsewhere: the dashboard works with no network.
        assert not re.search(rb"(?:src|href|url|fetch)\(?\s*[\"']?https?://", body)
    assert types == {
        b"/dashboard/static/app.js": "application/javascript",
        b"/dashboard/static/favicon.svg": "image/svg+xml",
        b"/dashboard/static/style.css": "text/css",
    }
    _type, script = _fetch(broker, "/dashboard/static/app.js")
    # Its data comes from the JSON admin API only.
    for path in re.findall(rb'api\(\s*[`"]([^`"$]+)', script):
        assert path.startswith((b"/admin/v2/", b"/admin/v3/")), path


# ---------------------------------------------------------------- in a browser


@pytest.fixture
def driver(browser, broker) -> Iterator:
    """The browser for one test: its log starts empty, and it leaves the page (which
    polls) before that test's broker stops."""
    browser.get_log("browser")
    yield browser
    browser.get("about:blank")


def _wait(driver, condition, message: str):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, WAIT_S, poll_frequency=0.1).until(
            lambda d: condition(d) or None
        )
    except TimeoutException:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "failure.png"))
        raise AssertionError(f"dashboard never showed {message}") from None


# The page re-renders on every poll, so an element found in one WebDriver call may be
# gone by the next. Each helper reads or acts inside a single script, which the browser
# runs between renders, so nothing it touches can go stale.


def _count(driver, selector: str) -> int:
    """How many elements match selector now."""
    return driver.execute_script("return document.querySelectorAll(arguments[0]).length", selector)


def _text(driver, selector: str) -> str:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]),"
        " e => e.innerText.trim()).join(' ')",
        selector,
    )


def _attribute(driver, selector: str, name: str) -> str | None:
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]);"
        " return e === null ? null : e.getAttribute(arguments[1])",
        selector,
        name,
    )


def _click(driver, selector: str) -> None:
    clicked = driver.execute_script(
        "const e = document.querySelector(arguments[0]);"
        " if (e === null) return false; e.click(); return true",
        selector,
    )
    assert clicked, f"nothing on the page matches {selector}"


def _screenshot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"screenshot {path} was not written"
    return path


def _script_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


@pytest.fixture
def stalled(client):
    """payments: `business` reads READ_COMMITTED, `monitoring` READ_UNCOMMITTED; an open
    transaction wrote after the first message and a plain message sits behind it.
    audit: a calm topic beside it."""
    consumers = {
        name: client.subscribe(
            TOPIC, name, isolation_level=level, initial_position=InitialPosition.Earliest
        )
        for name, level in (
            ("business", IsolationLevel.READ_COMMITTED),
            ("monitoring", IsolationLevel.READ_UNCOMMITTED),
        )
    }
    producer = client.create_producer(TOPIC)
    producer.send(b"transfer #1 committed")
    txn = client.new_transaction(timeout_ms=600_000)
    producer.send(b"transfer #2 inside the open transaction", txn=txn)
    producer.send(b"transfer #3 behind it")
    client.create_producer("audit").send(b"audit entry")
    consumers["business"].acknowledge(consumers["business"].receive(5000))
    yield txn, f"{txn.id[0]}:{txn.id[1]}"
    for consumer in consumers.values():
        consumer.close()


def test_dashboard_shows_the_stalled_topic_and_the_transaction_that_pins_it(
    broker, client, driver, stalled
):
    txn, txn_id = stalled
    row = f'#topics-body tr[data-topic="{TOPIC}"]'

    driver.get(broker.http_url + "/")
    _wait(
        driver, lambda d: _count(d, row + ".pinned"), "the payments topic highlighted as held back"
    )
    assert txn_id in _text(driver, row)
    assert TOPIC in _text(driver, "#topics-alert")
    assert "everything" in _text(driver, '#topics-body tr[data-topic$="/audit"]')
    _screenshot(driver, "topics")

    driver.get(broker.http_url + "/#/transactions")
    _wait(
        driver,
        lambda d: _count(d, f'#open-transactions tr[data-txn="{txn_id}"].pinning'),
        f"open transaction {txn_id} highlighted as pinning",
    )
    assert "pins 1 topic" in _text(driver, f'#open-transactions tr[data-txn="{txn_id}"]')
    pinned = _text(driver, f'#pinned-topics tr[data-topic="{TOPIC}"]')
    assert txn_id in pinned and "business" in pinned
    _screenshot(driver, "transactions")

    driver.get(broker.http_url + "/#/topic/public/default/payments")
    _wait(driver, lambda d: txn_id in _text(d, "#stall-reason"), "why business is held back")
    assert "business" in _text(driver, "#stall-reason")
    levels = {
        name: _text(driver, f'#subscriptions tr[data-subscription="{name}"] td.isolation')
        for name in ("business", "monitoring")
    }
    assert levels == {"business": "READ_COMMITTED", "monitoring": "READ_UNCOMMITTED"}
    assert "waiting" in _text(driver, '#subscriptions tr[data-subscription="business"]')
    assert "Ready" in _text(driver, "#buffer")

    _click(driver, 'button[data-peek="business"][data-level="READ_UNCOMMITTED"]')
    _wait(
        driver, lambda d: "transfer #3" in _text(d, "#peek-messages"), "the READ_UNCOMMITTED peek"
    )
    peeked = _text(driver, "#peek-messages")
    assert f"{txn_id} OPEN" in peeked and "transfer #1" not in peeked  # #1 is acknowledged
    _screenshot(driver, "topic")

    _click(driver, 'button[data-peek="business"][data-level="READ_COMMITTED"]')
    _wait(
        driver, lambda d: "READ_COMMITTED" in _text(d, "#peek-summary"), "the READ_COMMITTED peek"
    )
    assert "Nothing to read" in _text(driver, "#peek-messages")

    # Live: once the transaction commits, the page says so without a reload.
    txn.commit()
    _wait(
        driver,
        lambda d: "can read everything" in _text(d, "#topic-alert"),
        "the stall cleared after the commit",
    )
    assert "waiting" not in _text(driver, '#subscriptions tr[data-subscription="business"]')
    assert _script_errors(driver) == []


def test_dashboard_shows_each_subscriptions_isolation_level_and_the_rate_chart(
    broker, client, driver
):
    client.subscribe(TOPIC, "ledger", isolation_level=IsolationLevel.READ_UNCOMMITTED).close()
    producer = client.create_producer(TOPIC)
    for i in range(20):
        producer.send(f"m{i}".encode())
    driver.get(broker.http_url + "/#/topic/public/default/payments")
    _wait(
        driver,
        lambda d: _count(d, '#subscriptions tr[data-subscription="ledger"]'),
        "the ledger subscription",
    )
    assert "READ_UNCOMMITTED" in _text(driver, '#subscriptions tr[data-subscription="ledger"]')
    assert "can read everything" in _text(driver, "#topic-alert")
    # Two samples make a line: the chart is drawn from successive polls.
    _wait(
        driver,
        lambda d: (
            _count(d, "#topic-chart polyline") == 2
            and len((_attribute(d, "#topic-chart polyline.rate-in", "points") or "").split()) >= 2
        ),
        "the rate chart",
    )
    assert _script_errors(driver) == []


def test_dashboard_says_what_failed_when_the_api_refuses(broker, driver):
    driver.get(broker.http_url + "/#/topic/public/default/nowhere")
    _wait(
        driver,
        lambda d: "does not exist" in _text(d, "#error"),
        "the admin API's reason for the unknown topic",
    )
    assert "persistent://public/default/nowhere" in _text(driver, "#error")
    driver.get(broker.http_url + "/#/")
    _wait(driver, lambda d: "No topics yet" in _text(d, "#topics-body"), "the empty topic list")
    assert _text(driver, "#error") == ""


def test_dashboard_says_what_backlog_counts_and_when_counters_started(broker, client, driver):
    client.subscribe(TOPIC, "fresh", initial_position=InitialPosition.Earliest).close()
    producer = client.create_producer(TOPIC, producer_name="teller")
    producer.send(b"one")
    driver.get(broker.http_url + "/#/topic/public/default/payments")
    row = '#subscriptions tr[data-subscription="fresh"]'
    _wait(driver, lambda d: _count(d, row), "the fresh subscription")
    # Nothing acknowledged reads as such, not as a position before the first entry.
    assert _text(driver, row + " td.mark-delete") == "nothing acked"
    assert "Backlog (entries)" in _text(driver, "thead")
    _wait(driver, lambda d: "teller" in _text(d, "#publishers"), "the connected publisher")
    started = broker.admin("/admin/v2/brokers/runtime")["startedAtMs"]
    assert started <= int(time.time() * 1000)
    _wait(driver, lambda d: "counters since broker start" in _text(d, "#since"), "the start time")
    assert "since broker start" in _text(driver, "#topic-cards")
    producer.close()
    _wait(driver, lambda d: "No producers connected" in _text(d, "#publishers"), "no publisher")
    driver.get(broker.http_url + "/#/")
    _wait(driver, lambda d: _count(d, "#topics-body tr[data-topic]"), "the topic list")
    assert "Backlog (entries)" in _text(driver, "#topics thead")
    assert _script_errors(driver) == []


@pytest.mark.parametrize("address", ["#/nowhere", "#/topic/public/default", "#/transactions/x"])
def test_dashboard_answers_an_unknown_address_with_not_found(broker, driver, address):
    driver.get(broker.http_url + "/" + address)
    _wait(driver, lambda d: "Not found" in _text(d, "h1"), f"not found for {address}")
    assert address in _text(driver, "#not-found")
    _click(driver, '#not-found a[href="#/"]')
    _wait(driver, lambda d: "Topics" in _text(d, "h1"), "the topic list after following the link")


def test_dashboard_standalone_lists_this_broker_owning_every_topic(broker, client, driver):
    client.create_producer("ledger-a").send(b"a")
    client.create_producer("ledger-b").send(b"b")
    broker_id = f"127.0.0.1:{broker.grpc_port}"
    driver.get(broker.http_url + "/#/brokers")
    row = f'#brokers tr[data-broker="{broker_id}"]'
    _wait(driver, lambda d: _text(d, row + " td.owned") == "2", "this broker owning both topics")
    assert "this broker" in _text(driver, row) and "live" in _text(driver, row + " td.state")
    assert _count(driver, "#brokers tr") == 1
    assert "standalone" in _text(driver, "#cluster-cards")
    # One broker owns everything: the topic list has no owner column.
    driver.get(broker.http_url + "/#/")
    _wait(driver, lambda d: _count(d, "#topics-body tr[data-topic]") == 2, "the two topics")
    assert "Owner" not in _text(driver, "#topics thead")
    assert _text(driver, "#topics-served") == ""
    assert _script_errors(driver) == []
