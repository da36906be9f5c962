"""Separated stores and private keys (issue 17): the issuer's state and the helper's each in a
database of their own, keys from the environment or a key file, and `manage.py rotate_keys` — which
must not break a collection already open. Everything a device does goes through its HTTP endpoints.

With no transaction across the leader's and the helper's stores, a failure between the helper's
commit and the leader's must neither lose nor double a report: the attacks below fail the leader's
transaction after the helper's committed and compare the release with one of a run without fault."""

from __future__ import annotations

import base64
import contextlib
import importlib
from datetime import date
from types import SimpleNamespace

import numpy as np
import pytest
from django.apps import apps as django_apps
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections, transaction
from django.test import override_settings

from aggregation import aggregators, ingest
from aggregation.aggregators import HELPER, LEADER
from aggregation.issuer import issuer_key, issuer_public_key
from aggregation.keys import KeysUnavailable, key_file_read
from aggregation.models import (
    AggregatorKey,
    Collection,
    CollectionRules,
    HelperJob,
    HelperShare,
    IssuedToken,
    LeaderShare,
    PendingReport,
    ReportRejection,
    SpentToken,
    TokenIssuerKey,
)
from aggregation.reports import collection_close, rejections
from aggregation.services import collection_aggregate
from analyses import tasks
from analyses.models import Round
from analyses.services.recipes import recipe_create
from analyses.services.rounds import round_dispatch
from devices.models import ShardRun
from pfs_device import hpke
from pfs_device.report_client import AggregatorKeys, report_seal
from tests.unit.test_device_http import CENTRAL, shape_of, start, upload, verify, with_close


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
    assert [f.name for f in IssuedToken._meta.fields] == [
        "id",
        "collection_key",
        "device_digest",
        "blinded_digest",
        "issued_on",
    ]


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
        # Once the collection is released (the helper closes it when it gives its aggregate shares),
        # the next rotation deletes the retired key.
        with transaction.atomic():
            collection_aggregate(collection_key=key)
        # (and the key it retires at once: no open collection can have been sealed to it).
        assert "0 retired keys kept for collections opened before, 2 deleted" in _rotate("helper")
        if source == "file":
            assert len(key_file_read(path)) == 1
        else:
            assert AggregatorKey.objects.using("helper").filter(role="helper").count() == 1


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
    tagged = device.sign(
        report_seal(
            collection_key=key,
            batch_key="",
            vector=np.eye(8, dtype=np.int64)[1],
            keys=AggregatorKeys(leader=LEADER.public_key(), helper=stale),
            shape=shape_of(key),
        )
    )
    assert upload(tagged).status_code == 202
    verify(key)
    assert rejections(key) == {"helper": {"share_unopened": 1}} and _accepted(key) == 0


# ---------------------------------------------------------------- the helper's store


def _tables(alias: str) -> set[str]:
    return set(connections[alias].introspection.table_names())


def test_the_helpers_shares_keys_and_records_live_in_its_own_store_and_nowhere_else(
    api, phones, central_round, django_capture_on_commit_callbacks
) -> None:
    _, devices = phones
    key = central_round.task_key
    sealed = [device.report(key, 2) for device in devices[:4]]
    for report in sealed:
        assert upload(report).status_code == 202
    assert upload(sealed[0]).status_code == 202  # a replay: rejected
    verify(key)
    assert upload(devices[4].report(key, 1)).status_code == 202  # still pending

    default, helper = _tables("default"), _tables("helper")
    assert HelperShare._meta.db_table not in default and HelperJob._meta.db_table not in default
    for model in (LeaderShare, PendingReport, IssuedToken, TokenIssuerKey):
        assert model._meta.db_table not in helper
    # The leader's store: the leader's shares, key, tokens and counters; nothing of the helper's.
    assert LeaderShare.objects.filter(collection__key=key).exists() and PendingReport.objects.exists()
    for model in (AggregatorKey, SpentToken, ReportRejection):
        assert set(model.objects.using("default").values_list("role", flat=True)) == {"leader"}
    # The helper's: its shares, its key, its tokens and counters, its copy of the rules.
    assert HelperShare.objects.using("helper").filter(collection__key=key).exists()
    for model in (AggregatorKey, SpentToken):
        assert set(model.objects.using("helper").values_list("role", flat=True)) == {"helper"}
    # (The replay never reached it: the leader refused it first, so the helper counted nothing.)
    assert set(ReportRejection.objects.using("helper").values_list("role", flat=True)) <= {"helper"}
    leader_rules, helper_rules = (CollectionRules.objects.using(s).get(key=key) for s in ("default", "helper"))
    assert bytes(leader_rules.verify_key) == bytes(helper_rules.verify_key)
    assert bytes(AggregatorKey.objects.using("helper").get().private_key) not in {
        bytes(k) for k in AggregatorKey.objects.using("default").values_list("private_key", flat=True)
    }
    assert rejections(key) == {"leader": {"token_reused": 1}}

    with django_capture_on_commit_callbacks(execute=True):
        with_close(api, central_round)
    assert api.get(f"/api/rounds/{central_round.pk}/release/").json()["reports"] == 5
    for alias in ("default", "helper"):  # both aggregators' shares deleted once aggregated
        assert not (LeaderShare if alias == "default" else HelperShare).objects.using(alias).exists()
    assert not HelperJob.objects.using("helper").exists()


def _seeded_noise(monkeypatch) -> None:
    """Both aggregators draw the same noise in every run: releases compare exactly."""
    monkeypatch.setattr(aggregators, "noise_rng", lambda: np.random.default_rng(7))


def _device_round(api, devices, name: str, *, django_capture_on_commit_callbacks, fault=None) -> dict:
    """A round on real devices: 6 reports (one a replay), verified (``fault`` active), closed, released."""
    round_ = start(api, {**CENTRAL, "recipeIdentifier": name})
    key = round_.task_key
    for device, bucket in zip(devices, [1, 1, 2, 5, 5, 5], strict=False):
        assert upload(device.report(key, bucket)).status_code == 202
    if fault is None:
        verify(key)
    else:
        with fault(), pytest.raises(RuntimeError, match="leader's transaction"):
            verify(key)
    with django_capture_on_commit_callbacks(execute=True):
        with_close(api, round_)
    release = api.get(f"/api/rounds/{round_.pk}/release/").json()
    release["rejections"] = rejections(key)
    return release


def test_ingest_failing_after_the_helper_committed_resumes_the_job_and_releases_as_a_clean_run(
    api, phones, phones_analysis, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    _, devices = phones
    _seeded_noise(monkeypatch)
    clean = _device_round(api, devices, "clean", django_capture_on_commit_callbacks=django_capture_on_commit_callbacks)
    real_store = ingest.output_share_store
    calls = []

    def leader_fails_once(**kwargs) -> None:
        if kwargs["role"] == "leader" and not calls:
            calls.append(kwargs["pair"])
            assert HelperShare.objects.using("helper").filter(pair=kwargs["pair"]).exists()  # committed first
            raise RuntimeError("the worker died in the leader's transaction")
        real_store(**kwargs)

    class Fault:
        def __enter__(self):
            monkeypatch.setattr(ingest, "output_share_store", leader_fails_once)

        def __exit__(self, *exc):
            monkeypatch.setattr(ingest, "output_share_store", real_store)
            return False

    faulted = _device_round(
        api, devices, "faulted", django_capture_on_commit_callbacks=django_capture_on_commit_callbacks, fault=Fault
    )
    assert calls  # the fault happened
    assert faulted["reports"] == clean["reports"] == 6
    assert faulted["rejections"] == clean["rejections"] == {}  # no token_reused: the job was resumed
    assert [b["estimate"] for b in faulted["buckets"]] == [b["estimate"] for b in clean["buckets"]]
    assert faulted["refusals"] == clean["refusals"] == {}


def _simulated_round(analysis, recipe, analyst, name: str, *, between=None) -> Round:
    """A simulated round, shard by shard as the worker runs it (seed 5: the same coins every time)."""
    recipe_obj = recipe_create(analysis=analysis, content={**recipe, "recipeIdentifier": name}, user=analyst)
    round_ = Round.objects.create(recipe=recipe_obj, seed=5, created_by=analyst)
    for shard_id in round_dispatch(round_id=round_.pk):
        with contextlib.suppress(RuntimeError):  # a worker that died: the broker redelivers (``between``)
            tasks.run_shard.apply(args=(round_.pk, shard_id))
    if between is not None:
        between(round_)
    tasks.aggregate_round.apply(args=(round_.pk,))
    round_.refresh_from_db()
    return round_


def _estimates(round_: Round) -> list:
    return [(batch.get("cohort"), batch.get("estimates")) for batch in round_.release.content["batches"]]


def test_a_shard_failing_after_the_helper_committed_is_retried_and_releases_as_a_clean_run(
    analysis, recipe, analyst, monkeypatch
) -> None:
    clean = _simulated_round(analysis, recipe, analyst, "clean")
    real_create = ShardRun.objects.create
    failed = []

    def fail_shard_1_once(**fields):  # the last write of the shard's (the leader's) transaction
        if fields["shard"].index == 1 and not failed:
            failed.append(fields["shard"].pk)
            raise RuntimeError("the worker died in the leader's transaction")
        return real_create(**fields)

    monkeypatch.setattr(ShardRun.objects, "create", fail_shard_1_once)

    def redeliver(round_: Round) -> None:
        assert failed and not LeaderShare.objects.filter(source=f"shard:{failed[0]}").exists()
        assert HelperShare.objects.filter(source=f"shard:{failed[0]}").count() == 1  # the orphan
        tasks.run_shard.apply(args=(round_.pk, failed[0]))  # the message redelivered
        assert HelperShare.objects.filter(source=f"shard:{failed[0]}").count() == 2

    retried = _simulated_round(analysis, recipe, analyst, "retried", between=redeliver)
    assert clean.status == retried.status == Round.Status.RELEASED
    assert retried.release.content["reports"] == clean.release.content["reports"]
    assert _estimates(retried) == _estimates(clean)
    assert not HelperShare.objects.exists()  # the orphan deleted with the rest, uncounted


def test_a_helper_share_the_leader_never_names_is_not_counted(analysis, recipe, analyst) -> None:
    clean = _simulated_round(analysis, recipe, analyst, "clean")

    def smuggle(round_: Round) -> None:  # a helper row no leader row names, as a failed upload leaves
        stored = HelperShare.objects.filter(collection__key=round_.task_key).first()
        HelperShare.objects.create(
            collection=stored.collection,
            source=stored.source,
            pair="f" * 32,
            vector=np.arange(stored.collection.length, dtype="<u8").tobytes(),
            reports=500,
            min_cohort=stored.min_cohort,
        )

    smuggled = _simulated_round(analysis, recipe, analyst, "smuggled", between=smuggle)
    assert smuggled.release.content["reports"] == clean.release.content["reports"]
    assert _estimates(smuggled) == _estimates(clean)


def test_a_pair_the_leader_names_but_the_helper_lacks_makes_the_release_refuse_that_batch(
    analysis, recipe, analyst
) -> None:
    def lose_one(round_: Round) -> None:
        HelperShare.objects.filter(pk=HelperShare.objects.filter(collection__key=round_.task_key).first().pk).delete()

    round_ = _simulated_round(analysis, recipe, analyst, "lossy", between=lose_one)
    assert round_.status == Round.Status.WITHHELD
    (batch,) = round_.release.content["batches"]
    assert batch["suppressed"] and batch["reason"].startswith("helper: shares missing")
    assert batch["reports"] is None
    assert not HelperShare.objects.filter(collection__key=round_.task_key).exists()  # deleted, not released
    assert not LeaderShare.objects.filter(collection__key=round_.task_key).exists()


def test_the_leaders_readiness_does_not_wait_for_the_helper(db, monkeypatch) -> None:
    """The helper is another party's service: while it is down the leader still takes uploads
    (verified once it answers), so its readiness asks no helper and opens no helper database."""
    from pfs_base.health import readiness

    ready, checks = readiness()
    assert ready and "helper_database" not in checks and "helper" not in checks


@pytest.mark.django_db(transaction=True)
def test_an_older_database_hands_the_helpers_rows_over_to_its_own_store() -> None:
    """Before the helper had a store of its own its rows were in the default database: the migration,
    run on the helper's store, copies them over (an open collection keeps its helper shares, key and
    spent tokens, under the pair id its leader shares get) and deletes them there."""
    migration = importlib.import_module("aggregation.migrations.0007_helper_store")
    default = connections["default"]
    with default.schema_editor() as editor:  # the helper's share table as an older database has it
        editor.create_model(HelperShare)
    try:
        rules = CollectionRules.objects.using("default").create(key="old", length=2, min_cohort=1, weight_bound=1)
        batch = Collection.objects.using("default").create(key="old", batch_key="b", length=2)
        for model in (LeaderShare, HelperShare):
            model.objects.using("default").create(
                collection_id=batch.pk, source="shard:1", vector=b"\x01" * 16, reports=3, min_cohort=1
            )
        for role in ("leader", "helper"):
            AggregatorKey.objects.using("default").create(
                role=role, public_key=b"p" + role.encode(), private_key=role.encode()
            )
            SpentToken.objects.using("default").create(role=role, collection_key="old", token_digest="t" * 64)
            ReportRejection.objects.using("default").create(role=role, collection_key="old", reason="x", count=2)
        state = SimpleNamespace(connection=connections["default"])
        migration.leader_pairs_name(django_apps, state)
        migration.helper_rows_move(django_apps, SimpleNamespace(connection=connections["helper"]))

        moved = HelperShare.objects.using("helper").get()
        assert moved.pair == LeaderShare.objects.using("default").get().pair != ""  # the pair, named on both
        assert (moved.collection.key, moved.collection.batch_key, moved.reports) == ("old", "b", 3)
        copy = CollectionRules.objects.using("helper").get(key="old")
        assert bytes(copy.verify_key) == bytes(rules.verify_key) and copy.created_at == rules.created_at
        for model in (AggregatorKey, SpentToken, ReportRejection):
            assert set(model.objects.using("helper").values_list("role", flat=True)) == {"helper"}
            assert set(model.objects.using("default").values_list("role", flat=True)) == {"leader"}
        assert bytes(AggregatorKey.objects.using("helper").get().private_key) == b"helper"
        assert not HelperShare.objects.using("default").exists()
    finally:
        with default.schema_editor() as editor:
            editor.delete_model(HelperShare)


def test_the_helper_verifies_with_its_own_copy_of_the_rules(phones, central_round) -> None:
    """Its verification key from its own store: with a key other than the leader's, no proof passes
    (the two verifier shares no longer add up), so neither keeps the report."""
    _, devices = phones
    key = central_round.task_key
    CollectionRules.objects.using("helper").filter(key=key).update(verify_key=b"\x00" * 32)
    for device in devices[:3]:
        assert upload(device.report(key, 1)).status_code == 202
    verify(key)
    assert rejections(key) == {"helper": {"proof_invalid": 3}}  # decided by the helper, with its own key
    assert _accepted(key) == 0
