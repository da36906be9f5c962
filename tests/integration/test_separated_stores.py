"""Separated stores on PostgreSQL (issue 17): the issuer's records and keys in a database of their
own, the helper's shares, records and keys in another, the leader's in the default one, as the
documented deployment runs them (docs/deployment.md)."""

from __future__ import annotations

import pytest
from django.db import connections

from aggregation.models import (
    AggregatorKey,
    HelperJob,
    HelperShare,
    IssuedToken,
    LeaderShare,
    PendingReport,
    SpentToken,
    TokenIssuerKey,
)
from tests.unit.test_device_http import central_round, phones, phones_analysis, upload, verify  # noqa: F401

pytestmark = pytest.mark.django_db(databases=["default", "issuer", "helper"])

STORES = ("default", "issuer", "helper")
# Each table, and the one store that holds it.
ONLY_IN = {
    IssuedToken: "issuer",
    TokenIssuerKey: "issuer",
    HelperShare: "helper",
    HelperJob: "helper",
    LeaderShare: "default",
    PendingReport: "default",
}


def _table_exists(alias: str, table: str) -> bool:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
        return cursor.fetchone()[0]


def _count(alias: str, table: str, where: str = "") -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table} {where}")  # noqa: S608 (a model's table, a fixed clause)
        return cursor.fetchone()[0]


def test_the_issuer_the_leader_and_the_helper_keep_their_state_in_separate_postgresql_databases(
    phones,  # noqa: F811
    central_round,  # noqa: F811
) -> None:
    if any(connections[alias].vendor != "postgresql" for alias in STORES):
        pytest.fail("separate PostgreSQL databases need one: `make test` finds or starts it (DATABASE_URL)")
    assert len({connections[alias].settings_dict["NAME"] for alias in STORES}) == 3
    _, (device, other, *_) = phones
    assert upload(device.report(central_round.task_key, 1)).status_code == 202
    verify(central_round.task_key)
    assert upload(other.report(central_round.task_key, 2)).status_code == 202  # still pending
    for model, home in ONLY_IN.items():
        for alias in STORES:
            assert _table_exists(alias, model._meta.db_table) == (alias == home), (model, alias)
    assert _count("issuer", IssuedToken._meta.db_table) == 2
    assert _count("helper", HelperShare._meta.db_table) == 1 and _count("default", LeaderShare._meta.db_table) == 1
    assert _count("default", PendingReport._meta.db_table) == 1
    # Keys and spent tokens: each aggregator's in its own database only.
    for model in (AggregatorKey, SpentToken):
        table = model._meta.db_table
        assert _count("default", table, "WHERE role = 'helper'") == 0 and _count("default", table) >= 1
        assert _count("helper", table, "WHERE role = 'leader'") == 0 and _count("helper", table) >= 1
    assert sum(share.reports for share in LeaderShare.objects.filter(collection__key=central_round.task_key)) == 1
