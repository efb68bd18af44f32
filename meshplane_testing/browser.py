"""A real browser for the console's tests: Debian's Chromium, headless, driven by Playwright."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from meshplane_testing.process import MissingRequirement, require_binary

SCREENSHOTS = Path(__file__).resolve().parent.parent / "test-screenshots"
"""Where each console test leaves its screenshot (ignored by git)."""


@contextlib.contextmanager
def chromium() -> Iterator[object]:
    """A headless Chromium (the system's: Playwright's own download is not used), closed afterwards."""
    executable = require_binary("chromium", "/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise MissingRequirement("playwright is not installed (make .venv/.installed installs it)") from None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page: object, name: str) -> Path:
    """Save the page as it looks now under test-screenshots/<name>.png."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path


def sign_in(page: object, url: str, token: str) -> None:
    """Open the console at `url` and sign in with `token` through its sign-in form."""
    page.goto(f"{url}/ui/")  # type: ignore[attr-defined]
    page.get_by_label("Token").fill(token)  # type: ignore[attr-defined]
    page.get_by_role("button", name="Sign in", exact=True).click()  # type: ignore[attr-defined]
