"""Child process for the crash test: sends until the broker dies, printing each ack.

Each line on stdout is `index ledger:entry:batch` for a send the broker acknowledged.
"""

from __future__ import annotations

import contextlib
import sys
import threading

import stableline


def main(service_url: str, topic: str, start: int) -> None:
    lock = threading.Lock()
    failed = threading.Event()

    def acked(index: int):
        def callback(error, message_id) -> None:
            if error is not None:
                failed.set()
                return
            with lock:
                sys.stdout.write(f"{index} {message_id}\n")
                sys.stdout.flush()

        return callback

    # Once the broker is killed, pending sends fail after the operation timeout and
    # this process exits: the default 30 s would be most of each crash cycle.
    with stableline.Client(service_url, operation_timeout_seconds=5.0) as client:
        producer = client.create_producer(topic, batching_max_messages=50)
        index = start
        while not failed.is_set():
            producer.send_async(f"value-{index}".encode(), acked(index))
            index += 1
            if index % 200 == 0:
                try:
                    producer.flush()
                except stableline.StableLineError:
                    break


if __name__ == "__main__":
    with contextlib.suppress(stableline.StableLineError):
        main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
