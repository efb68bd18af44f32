"""One browser per module of console tests; each test opens its own page.

Playwright's synchronous API runs an event loop of its own on this thread while its browser lives: the browser
closes with its module, so the asynchronous tests that follow find no loop running."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from meshplane_testing.browser import chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    opened.set_default_timeout(10_000)
    yield opened
    context.close()
