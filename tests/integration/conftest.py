from __future__ import annotations

import pytest

from pfs_web.celery import app as celery_app
from tests.services import Worker, redis_url_or_fail, restore_inline_tasks, use_celery_worker

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


@pytest.fixture
def paced_worker(fault_queue, tmp_path):
    """A worker of the test's own whose operator trusts devices to pace over 10 s, as the devices
    here do (rate validation's floor, PFS_DEVICE_MIN_SPREAD; the session's worker keeps 600 s)."""
    worker = Worker(
        redis_url_or_fail(), tmp_path / "worker.log", queue=fault_queue, extra_env={"PFS_DEVICE_MIN_SPREAD": "10"}
    )
    try:
        worker.wait_ready()
        yield worker
    finally:
        worker.stop()
