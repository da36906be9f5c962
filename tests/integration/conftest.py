from __future__ import annotations

import pytest

from pfs_web.celery import app as celery_app
from tests.services import restore_inline_tasks, use_celery_worker

FAULTS_QUEUE = "faults"  # its own queue, so the session's worker does not take these tests' tasks


@pytest.fixture
def worker(celery_worker_process, transactional_db, settings):
    use_celery_worker(settings)
    yield celery_worker_process
    restore_inline_tasks()


@pytest.fixture
def fault_queue(transactional_db, settings):
    """Tasks go to a queue only the workers a test starts (and kills) consume."""
    use_celery_worker(settings)
    celery_app.conf.task_default_queue = FAULTS_QUEUE
    with celery_app.connection_for_write() as connection:
        connection.default_channel.queue_purge(FAULTS_QUEUE)  # nothing from an earlier run reaches this test
    yield FAULTS_QUEUE
    celery_app.conf.task_default_queue = "celery"
    restore_inline_tasks()
