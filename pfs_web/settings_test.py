"""Settings for the test suite: the production settings, with tasks inline unless a test says otherwise.

Integration tests switch to a real Celery worker over Redis (tests/integration/conftest.py).
"""

import base64
import hashlib
import os

from pfs_device.attestation import public_of

os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production")
# The suite never reads this checkout's .env (make setup's local settings): tests set what they need.
# Exported, so that the servers and workers the tests start do not read it either.
os.environ.setdefault("PFS_ENV_FILE", os.devnull)
# The unit tests run the helper's views in this process (aggregation.helper_client); a test that
# starts the helper as its own process sets PFS_HELPER_TRANSPORT=http for the leader it starts.
os.environ.setdefault("PFS_HELPER_TRANSPORT", "in-process")
# The test attestation authority (tests/attest.py plays it) and the issuer's statement key: fixed test
# keys, exported so the helper and the servers the tests start verify with the same public keys.
for _name, _purpose in (("PFS_ATTESTATION", "attestation authority"), ("PFS_ISSUER_STATEMENT", "issuer statements")):
    _seed = hashlib.sha256(f"pfs-studio test {_purpose}".encode()).digest()
    os.environ.setdefault(f"{_name}_KEY", base64.b64encode(_seed).decode())
    os.environ.setdefault(f"{_name}_PUBLIC_KEY", base64.b64encode(public_of(_seed)).decode())

from pfs_web.settings import *  # noqa: E402,F403

PFS_TASK_MODE = "sync"
CELERY_TASK_ALWAYS_EAGER = True
# Pages render {% static %} without a collectstatic first (the production profile's test collects).
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}  # noqa: F405
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests
# Request counts in this process's memory, and rates no test reaches by accident: a test of the
# limits sets its own rate (tests/unit/test_api_limits.py).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "pfs-tests"}}
REST_FRAMEWORK = {  # noqa: F405
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_THROTTLE_RATES": {scope: "100000/minute" for scope in REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]},  # noqa: F405
}
