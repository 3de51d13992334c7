"""Browser tests: Debian's headless Chromium, driven by Playwright's sync API, against pytest-django's
live_server (a real server thread over the test database, so tests use transactional_db).

Fixtures, generic on purpose (every console area's browser tests use them):

- `browser_page(user)`: a new page whose browser is signed in as `user` (None: signed out). Pages resolve
  relative URLs against the live server: `page.goto("/executions/")`.
- `screenshot(page, name)`: saves artifacts/<name>.png at the repository root (gitignored; CI keeps it).

Every test here is marked `browser` and is skipped, with the reason, only when /usr/bin/chromium is absent.
Playwright never downloads a browser: it is always given Debian's executable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connections
from django.test import Client

from config import celery_app
from console import signing
from console.connectors import measures
from console.connectors import tools as connector_tools

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
VIEWPORT = {"width": 1440, "height": 1000}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(autouse=True)
def _console_state(settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # What the console tests get from tests/console/conftest.py, for the server thread too: a throwaway
    # grant key, lookups run in-process (no worker), and connector registries restored afterwards.
    settings.PREFLIGHT_SIGNING_KEY_PATH = tmp_path / "keys" / "grant_signing_key.pem"
    monkeypatch.setattr(connector_tools, "_TOOLS", dict(connector_tools._TOOLS))
    monkeypatch.setattr(measures, "_LOOKUPS", dict(measures._LOOKUPS))
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = eager
    signing._signers.clear()


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """One Chromium per test. Not per session: Playwright's sync API keeps an event loop in this thread while
    it is started, and Django would then refuse ORM calls from every later test in this worker."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"browser tests need Debian's Chromium at {CHROMIUM} (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    # The test body still calls the ORM synchronously, in this thread, beside Playwright's loop.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        # Database connections opened while Playwright's loop ran belong to that context, not to the
        # thread's: close them here, or they outlive the test and block the test database's teardown.
        connections.close_all()
        playwright.stop()


@pytest.fixture
def browser_page(transactional_db: None, live_server: Any, browser: Any) -> Iterator[Callable[..., Any]]:
    contexts = []

    def open_page(user: Any = None, *, javascript: bool = True) -> Any:
        context = browser.new_context(
            base_url=live_server.url, viewport=VIEWPORT, java_script_enabled=javascript
        )
        context.set_default_timeout(10_000)
        contexts.append(context)
        if user is not None:
            # The session of a real login, without typing: a test about signing in uses the form itself.
            client = Client()
            client.force_login(user)
            cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
            context.add_cookies(
                [{"name": django_settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}]
            )
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


@pytest.fixture
def screenshot() -> Callable[[Any, str], Path]:
    def take(page: Any, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
