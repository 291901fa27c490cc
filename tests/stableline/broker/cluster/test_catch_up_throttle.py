"""The catch-up throttle bounds the bytes it lets through over time (a fake clock:
time passes only when the throttle sleeps, so the measure is exact)."""

from __future__ import annotations

import asyncio

from stableline.broker.cluster.catch_up_throttle import CatchUpThrottle


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds
        await asyncio.sleep(0)


def run(coroutine):
    return asyncio.run(coroutine)


def test_bytes_over_time_stay_within_rate_plus_burst():
    clock = FakeClock()
    rate = 1_000_000
    throttle = CatchUpThrottle(rate, clock, clock.sleep)
    let_through: list[tuple[float, int]] = []

    async def send(total: int, chunk: int) -> None:
        for _ in range(total // chunk):
            await throttle.acquire(chunk)
            let_through.append((clock.now, chunk))

    run(send(10_000_000, 250_000))
    assert throttle.sent_bytes == 10_000_000
    # 10 MB at 1 MB/s, the first second's worth free: 9 s.
    assert 8.9 <= clock.now <= 9.1
    for start, _ in let_through:
        within = sum(n for at, n in let_through if start <= at <= start + 1.0)
        assert within <= 2 * rate + 250_000, (start, within)


def test_callers_share_the_rate():
    clock = FakeClock()
    throttle = CatchUpThrottle(1_000_000, clock, clock.sleep)

    async def both() -> None:
        async def one() -> None:
            for _ in range(20):
                await throttle.acquire(100_000)

        await asyncio.gather(one(), one(), one())

    run(both())
    # 6 MB over three callers still at 1 MB/s: 5 s after the free first second.
    assert 4.9 <= clock.now <= 5.1


def test_a_call_larger_than_the_burst_goes_through_and_leaves_a_debt():
    clock = FakeClock()
    throttle = CatchUpThrottle(1_000, clock, clock.sleep)

    async def calls() -> None:
        await throttle.acquire(5_000)  # the bucket is full: through at once
        assert clock.now == 0.0
        await throttle.acquire(1)  # waits off the 4 000 bytes of debt
        assert clock.now >= 4.0

    run(calls())
