"""The production cache on a real Redis: request counts are atomic, shared and expire; limits hold."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis
from django.core.cache import caches

from pfs_base.api_limits import request_count
from tests.services import redis_url_or_fail

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_cache(settings):
    """pfs_base.cache.RedisCache on the test Redis, under a prefix of this test's own."""
    url = redis_url_or_fail()
    prefix = f"pfs-test-{uuid.uuid4().hex}"
    settings.CACHES = {"default": {"BACKEND": "pfs_base.cache.RedisCache", "LOCATION": url, "KEY_PREFIX": prefix}}
    raw = redis.Redis.from_url(url)
    yield raw
    for key in raw.scan_iter(f"{prefix}:*"):
        raw.delete(key)


def test_counts_are_atomic_across_threads_and_expire(redis_cache) -> None:
    """Each thread has its own cache object and connection, as each server process does."""

    def count_many() -> None:
        for _ in range(50):
            request_count("window", timeout=30)

    threads = [threading.Thread(target=count_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert request_count("window", timeout=30) == 8 * 50 + 1
    full_key = caches["default"].make_and_validate_key("window")
    assert 0 < redis_cache.ttl(full_key) <= 30  # set on the first count, not pushed back by the others


def test_reads_over_the_user_rate_are_refused_with_redis_counting(redis_cache, api, analysis, settings) -> None:
    rates = {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "user": "3/minute"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    # The limit counts in fixed windows of a minute: four requests that straddle a window's end
    # would start again from zero. They are sent early in one (a busy machine takes seconds for them).
    if time.time() % 60 > 45:
        time.sleep(60 - time.time() % 60)
    statuses = [api.get("/api/analyses/").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    refused = api.get("/api/analyses/")
    assert refused.json()["code"] == "throttled"
    assert 1 <= int(refused["Retry-After"]) <= 60


def test_the_cache_serves_what_it_stored(redis_cache) -> None:
    cache = caches["default"]
    cache.set("release", {"batches": [1.5, 2.5]}, timeout=30)
    assert cache.get("release") == {"batches": [1.5, 2.5]}
    assert cache.get("absent") is None
