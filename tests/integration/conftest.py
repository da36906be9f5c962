from __future__ import annotations

import pytest

from tests.services import restore_inline_tasks, use_celery_worker


@pytest.fixture
def worker(celery_worker_process, transactional_db, settings):
    use_celery_worker(settings)
    yield celery_worker_process
    restore_inline_tasks()
