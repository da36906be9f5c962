"""Separated stores on PostgreSQL (issue 17): the issuer's records and keys in a database of their
own, the aggregators' in another, as the documented deployment runs them (docs/deployment.md)."""

from __future__ import annotations

import pytest
from django.db import connections

from aggregation.models import IssuedToken, LeaderShare, PendingReport, TokenIssuerKey
from tests.unit.test_device_http import central_round, phones, phones_analysis, upload, verify  # noqa: F401

pytestmark = pytest.mark.django_db(databases=["default", "issuer"])


def _table_exists(alias: str, table: str) -> bool:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
        return cursor.fetchone()[0]


def test_the_issuer_and_the_aggregators_keep_their_state_in_separate_postgresql_databases(
    phones,  # noqa: F811
    central_round,  # noqa: F811
) -> None:
    if connections["default"].vendor != "postgresql" or connections["issuer"].vendor != "postgresql":
        pytest.fail("separate PostgreSQL databases need one: `make test` finds or starts it (DATABASE_URL)")
    assert connections["issuer"].settings_dict["NAME"] != connections["default"].settings_dict["NAME"]
    _, (device, *_) = phones
    assert upload(device.report(central_round.task_key, 1)).status_code == 202
    verify(central_round.task_key)
    for model in (IssuedToken, TokenIssuerKey):
        assert _table_exists("issuer", model._meta.db_table) and not _table_exists("default", model._meta.db_table)
    for model in (PendingReport, LeaderShare):
        assert _table_exists("default", model._meta.db_table) and not _table_exists("issuer", model._meta.db_table)
    with connections["issuer"].cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {IssuedToken._meta.db_table}")  # noqa: S608 (a model's table)
        assert cursor.fetchone()[0] == 1
    assert sum(share.reports for share in LeaderShare.objects.filter(collection__key=central_round.task_key)) == 1
