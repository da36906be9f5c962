"""Separated stores and private keys (issue 17): the issuer's state in a database of its own, keys
from the environment or a key file, and `manage.py rotate_keys` — which must not break a
collection already open. Everything a device does goes through its HTTP endpoints."""

from __future__ import annotations

import base64
import importlib
import os
import subprocess
import sys
from datetime import date
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from django.apps import apps as django_apps
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test import override_settings

from aggregation import hpke
from aggregation.aggregators import HELPER, LEADER
from aggregation.issuer import issuer_key, issuer_public_key
from aggregation.keys import KeysUnavailable, key_file_read
from aggregation.models import AggregatorKey, IssuedToken, LeaderShare, PendingReport, TokenIssuerKey
from aggregation.reports import collection_close, rejections
from devices.report_client import AggregatorKeys, report_seal
from tests.unit.test_device_http import CENTRAL, shape_of, start, upload, verify

ROOT_DIR = Path(__file__).resolve().parents[2]  # the checkout (manage.py)


def _rotate(role: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command("rotate_keys", "--role", role, stdout=out)
    return out.getvalue()


def _accepted(key: str) -> int:
    return sum(share.reports for share in LeaderShare.objects.filter(collection__key=key))


def _keys(leader: list[bytes] | None = None, **files: str):
    """Settings with keys from the environment (``leader``) or from files (role=path)."""
    return override_settings(
        PFS_KEYS={"leader": leader or [], "helper": [], "issuer": []},
        PFS_KEY_FILES={"leader": None, "helper": None, "issuer": None, **files},
    )


# ---------------------------------------------------------------- the issuer's store


def test_the_issuers_records_and_keys_live_in_its_own_store_and_nowhere_else(phones, central_round) -> None:
    _, (device, *_) = phones
    assert upload(device.report(central_round.task_key, 2)).status_code == 202
    issuer_tables = connections["issuer"].introspection.table_names()
    default_tables = connections["default"].introspection.table_names()
    for model in (IssuedToken, TokenIssuerKey):
        assert model._meta.db_table in issuer_tables and model._meta.db_table not in default_tables
    for model in (PendingReport, LeaderShare, AggregatorKey):
        assert model._meta.db_table in default_tables and model._meta.db_table not in issuer_tables
    assert IssuedToken.objects.using("issuer").filter(collection_key=central_round.task_key).count() == 1
    # The issuer keeps the day of an issue, never a finer time.
    assert [f.name for f in IssuedToken._meta.fields] == ["id", "collection_key", "device_digest", "issued_on"]


# ---------------------------------------------------------------- keys from the environment or a file


def test_an_aggregator_key_from_the_environment_is_served_and_opens_shares(phones, central_round) -> None:
    private, public = hpke.key_pair_generate()
    _, (device, *_) = phones
    with _keys(leader=[private]):
        served = base64.b64decode(device.tasks()["aggregators"]["leader"])
        assert served == public
        assert upload(device.report(central_round.task_key, 1)).status_code == 202
        verify(central_round.task_key)
    assert _accepted(central_round.task_key) == 1
    assert not AggregatorKey.objects.filter(role="leader").exists()  # never written to the database


def test_issuer_keys_are_sealed_under_the_wrapping_key_from_a_file(phones, central_round, tmp_path) -> None:
    path = tmp_path / "issuer.key"
    _, (device, *_) = phones
    with _keys(issuer=str(path)):
        _rotate("issuer")  # writes the first wrapping key
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        key = central_round.task_key
        assert upload(device.report(key, 1)).status_code == 202
        row = TokenIssuerKey.objects.get(collection_key=key)
        assert row.prime_p == row.prime_q == "" and bytes(row.wrapped)  # no prime in the store
        verify(key)
        assert _accepted(key) == 1
    # The store alone signs nothing: without the file the key does not open, and no token is issued.
    with _keys():
        assert phones[1][1].token_request(key, 12345).status_code == 500
        with pytest.raises(KeysUnavailable, match="which its database does not hold"):
            issuer_key(key)
    assert IssuedToken.objects.filter(collection_key=key).count() == 1


def test_a_missing_key_file_names_the_file_and_the_command_that_writes_it(phones, central_round, tmp_path) -> None:
    _, (device, *_) = phones
    with _keys(helper=str(tmp_path / "absent.key")):
        assert device.api.get("/api/device/tasks/").status_code == 500
        with pytest.raises(KeysUnavailable, match=r"absent\.key: No such file .*rotate_keys writes it"):
            HELPER.public_key()


# ---------------------------------------------------------------- rotation


@pytest.mark.parametrize("source", ["database", "file"])
def test_rotating_an_aggregator_key_keeps_open_collections_working(api, phones, central_round, tmp_path, source):
    path = tmp_path / "helper.key"
    settings = _keys(helper=str(path)) if source == "file" else _keys()
    _, devices = phones
    key = central_round.task_key
    with settings:
        if source == "file":
            _rotate("helper")
        before = HELPER.public_key()
        sealed_before = [device.report(key, 1) for device in devices[:2]]  # tasks fetched before the rotation
        assert "1 retired keys kept" in _rotate("helper")
        after = HELPER.public_key()
        assert after != before
        assert base64.b64decode(devices[2].tasks()["aggregators"]["helper"]) == after  # new tasks: the new key
        for report in [*sealed_before, devices[2].report(key, 1)]:
            assert upload(report).status_code == 202
        verify(key)
        assert _accepted(key) == 3 and rejections(key) == {}
        # Once the collection is closed and verified, the next rotation deletes the retired key.
        collection_close(collection_key=key)
        # (and the key it retires at once: no open collection can have been sealed to it).
        assert "0 retired keys kept for collections opened before, 2 deleted" in _rotate("helper")
        if source == "file":
            assert len(key_file_read(path)) == 1
        else:
            assert AggregatorKey.objects.filter(role="helper").count() == 1


def test_rotating_the_issuer_keeps_open_collections_keys_and_erases_closed_ones(
    api, phones, phones_analysis, tmp_path
) -> None:
    path = tmp_path / "issuer.key"
    _, devices = phones
    with _keys(issuer=str(path)):
        _rotate("issuer")
        first_wrapping = key_file_read(path)[0].key
        open_round, closed_round = start(api, CENTRAL), start(api, {**CENTRAL, "recipeIdentifier": "other"})
        committed = issuer_public_key(open_round.task_key)
        assert upload(devices[0].report(open_round.task_key, 1)).status_code == 202
        assert upload(devices[0].report(closed_round.task_key, 1)).status_code == 202
        verify(closed_round.task_key)
        collection_close(collection_key=closed_round.task_key)
        summary = _rotate("issuer")
        assert "1 closed collections' signing keys erased, 1 sealed under the current wrapping key" in summary
        assert [stored.key for stored in key_file_read(path)] != [first_wrapping]  # a new wrapping key, alone
        assert len(key_file_read(path)) == 1
        # The open collection: the same key its task commits to, still signing and verifying.
        assert issuer_public_key(open_round.task_key) == committed
        assert upload(devices[1].report(open_round.task_key, 1)).status_code == 202
        verify(open_round.task_key)
        assert _accepted(open_round.task_key) == 2
        erased = TokenIssuerKey.objects.get(collection_key=closed_round.task_key)
        assert (erased.prime_p, bytes(erased.wrapped)) == ("", b"") and erased.modulus  # the public half stays


def test_rotate_keys_refuses_an_unknown_role_with_exit_2_and_changes_nothing(db) -> None:
    before = list(AggregatorKey.objects.values_list("pk", flat=True))
    with pytest.raises(CommandError, match="not one of leader, helper, issuer") as error:
        call_command("rotate_keys", "--role", "collector")
    assert error.value.returncode == 2
    assert list(AggregatorKey.objects.values_list("pk", flat=True)) == before


def test_rotate_keys_refuses_keys_from_the_environment_with_exit_2(db) -> None:
    private, _ = hpke.key_pair_generate()
    with _keys(leader=[private]), pytest.raises(CommandError, match="PFS_LEADER_KEY; put a new key first") as error:
        call_command("rotate_keys", "--role", "leader")
    assert error.value.returncode == 2
    assert not AggregatorKey.objects.exists()


def test_rotate_keys_on_the_command_line_exits_2_on_bad_input(tmp_path) -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "pfs_web.settings_test", "PFS_LEADER_KEY": "not base64!"}
    finished = subprocess.run(
        [sys.executable, "manage.py", "rotate_keys", "--role", "leader"],
        cwd=ROOT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode != 0 and "PFS_LEADER_KEY: a key must be base64" in finished.stderr
    missing = subprocess.run(
        [sys.executable, "manage.py", "rotate_keys"], cwd=ROOT_DIR, env={**os.environ}, capture_output=True, timeout=60
    )
    assert missing.returncode == 2 and b"--role" in missing.stderr


@pytest.mark.django_db(transaction=True)
def test_an_older_database_hands_the_issuers_rows_over_to_its_own_store() -> None:
    """Before the issuer had a store of its own its rows were in the default database: the migration,
    run on the issuer's store, copies them over (an open collection keeps its key) and empties them there."""
    migration = importlib.import_module("aggregation.migrations.0005_stores_coarse_times_and_keys")
    default = connections["default"]
    with default.schema_editor() as editor:  # the tables as an older database has them
        editor.create_model(TokenIssuerKey)
        editor.create_model(IssuedToken)
    try:
        TokenIssuerKey.objects.using("default").create(
            collection_key="old", modulus="35", public_exponent="65537", prime_p="5", prime_q="7"
        )
        IssuedToken.objects.using("default").create(collection_key="old", device_digest="d" * 64)
        IssuedToken.objects.using("default").update(issued_on=date(2026, 1, 2))
        migration.issuer_rows_move(django_apps, SimpleNamespace(connection=connections["issuer"]))
        moved = TokenIssuerKey.objects.using("issuer").get(collection_key="old")
        assert (moved.modulus, moved.prime_p, moved.prime_q) == ("35", "5", "7")
        assert IssuedToken.objects.using("issuer").get().issued_on == date(2026, 1, 2)  # its day, not today
        assert not TokenIssuerKey.objects.using("default").exists()
        assert not IssuedToken.objects.using("default").exists()
    finally:
        with default.schema_editor() as editor:
            editor.delete_model(IssuedToken)
            editor.delete_model(TokenIssuerKey)


def test_a_process_whose_issuer_database_does_not_answer_is_not_ready(db, monkeypatch) -> None:
    from pfs_base.health import readiness

    def refused():
        raise OSError("connection refused")

    monkeypatch.setattr(connections["issuer"], "cursor", refused)
    ready, checks = readiness()
    assert not ready and checks["database"]["ok"]
    assert checks["issuer_database"] == {"ok": False, "error": "OSError: connection refused"}


def test_a_key_retired_before_a_collection_opened_does_not_open_its_shares(api, phones, phones_analysis) -> None:
    """A server that serves one device a long-retired key, to tell its report apart by the key that
    opens it, gets the report refused: a retired key opens only collections opened before it retired."""
    _, (device, *_) = phones
    stale = HELPER.public_key()
    _rotate("helper")
    key = start(api, CENTRAL).task_key  # opened after the rotation
    tagged = report_seal(
        collection_key=key,
        batch_key="",
        vector=np.eye(8, dtype=np.int64)[1],
        keys=AggregatorKeys(leader=LEADER.public_key(), helper=stale),
        token=device.token(key),
        shape=shape_of(key),
    )
    assert upload(tagged).status_code == 202
    verify(key)
    assert rejections(key) == {"helper": {"share_unopened": 1}} and _accepted(key) == 0
