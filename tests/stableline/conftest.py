"""Fixtures of the broker's faces' tests: a headless Chromium for the dashboard."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.stableline.browser import browser_or_skip


@pytest.fixture(scope="module")
def browser() -> Iterator:
    started = browser_or_skip()
    try:
        yield started
    finally:
        started.quit()
