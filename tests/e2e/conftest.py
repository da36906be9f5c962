from __future__ import annotations

import os

import pytest
from django.core.management import call_command
from playwright.sync_api import sync_playwright

from tests.services import chromium_or_fail, restore_inline_tasks, use_celery_worker

# Playwright's sync API runs an event loop in this thread; the test's own ORM calls are synchronous.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

# The flags Debian's Chromium needs here: no sandbox as root, and no background connections to a
# network that is closed.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


@pytest.fixture(scope="session")
def browser():
    executable = chromium_or_fail()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def demo(celery_worker_process, transactional_db, settings):
    """The demo of `make setup` (100,000 devices), its rounds run by the real worker."""
    call_command("seed_demo")
    use_celery_worker(settings)
    yield
    restore_inline_tasks()
