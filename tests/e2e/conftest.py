from __future__ import annotations

import pytest
from django.core.management import call_command

from tests.services import restore_inline_tasks, use_celery_worker


@pytest.fixture
def page(browser):  # browser: one Chromium for the session (tests/conftest.py)
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
