"""Screenshot of the dashboard for its docs page (docs/dashboard.png).

Starts a broker on a temporary data dir, runs a small payments load (a producer,
a READ_COMMITTED and a READ_UNCOMMITTED subscription consuming), opens a
transaction that stays open so READ_COMMITTED stalls behind it, and photographs
the topic page in headless Chromium with a READ_UNCOMMITTED peek. Needs
selenium and Debian's chromium + chromium-driver (scripts/dev/install_test_servers.sh).

    python scripts/dev/dashboard_screenshot.py --output docs/dashboard.png
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import stableline
from stableline.testing import temporary_broker

TOPIC = "persistent://public/default/payments"
RATE_PER_S = 40


def produce(service_url: str, stop: threading.Event) -> None:
    with stableline.Client(service_url) as client:
        producer = client.create_producer(TOPIC)
        sent = 0
        while not stop.is_set():
            producer.send(f"transfer #{sent}: 25.00 EUR".encode(), partition_key=f"acct-{sent % 7}")
            sent += 1
            stop.wait(1 / RATE_PER_S)


def consume(service_url: str, name: str, level, stop: threading.Event) -> None:
    with stableline.Client(service_url) as client:
        consumer = client.subscribe(
            TOPIC,
            name,
            consumer_type=stableline.ConsumerType.Shared,
            isolation_level=level,
            initial_position=stableline.InitialPosition.Earliest,
        )
        while not stop.is_set():
            for message in consumer.batch_receive(max_num_messages=100, timeout_millis=200):
                consumer.acknowledge(message)
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("docs/dashboard.png"))
    parser.add_argument("--warmup-s", type=float, default=20.0, help="load before the stall")
    parser.add_argument("--stall-s", type=float, default=25.0, help="load during the stall")
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory() as parent,
        temporary_broker(Path(parent)) as broker,
        stableline.Client(broker.service_url) as client,
    ):
        stop = threading.Event()
        threads = [
            threading.Thread(
                target=consume, args=(broker.service_url, name, level, stop), daemon=True
            )
            for name, level in (
                ("business", stableline.IsolationLevel.READ_COMMITTED),
                ("monitoring", stableline.IsolationLevel.READ_UNCOMMITTED),
            )
        ]
        threads.append(
            threading.Thread(target=produce, args=(broker.service_url, stop), daemon=True)
        )
        for thread in threads:
            thread.start()
        client.create_producer("persistent://public/default/audit").send(b"audit entry")

        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
            options.add_argument(argument)
        options.add_argument("--window-size=1280,1180")
        driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
        try:
            driver.get(broker.http_url + "/#/topic/public/default/payments")
            time.sleep(args.warmup_s)  # the chart fills with samples of the steady load
            txn = client.new_transaction(timeout_ms=3_600_000)
            transfer = client.create_producer(TOPIC)
            transfer.send(b"batch transfer: debit 1,200.00 EUR", txn=txn)
            transfer.send(b"batch transfer: credit 1,200.00 EUR", txn=txn)
            time.sleep(args.stall_s)
            driver.find_element(
                By.CSS_SELECTOR, 'button[data-peek="business"][data-level="READ_UNCOMMITTED"]'
            ).click()
            WebDriverWait(driver, 10).until(lambda d: "OPEN" in d.find_element(By.ID, "peek").text)
            driver.execute_script("window.scrollTo(0, 0)")
            args.output.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(args.output))
            print(f"wrote {args.output}")
        finally:
            driver.quit()
            stop.set()
            for thread in threads:
                thread.join(timeout=10)


if __name__ == "__main__":
    main()
