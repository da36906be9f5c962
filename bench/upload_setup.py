"""bench/upload.py's setup: a fleet with open rounds, and its reports sealed by the device code.

Run inside bench/upload.py's process once Django is set up (its imports wait for that).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR = ROOT / "var"
RECIPE = {
    "query": "select age from KeyboardNGrams",
    "cohorts": [],
    "dataTypeContent": {"age": {"dataType": "BucketedType", "boundaries": [20, 30, 40, 50, 60, 70, 80]}},
    "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 2.0, "epsilon": 1.0, "delta": 1e-6},
}


def recipe_for(buckets: int) -> dict:
    """RECIPE with ``buckets`` age buckets (OOV and buckets - 1 ranges)."""
    ages = {"age": {"dataType": "BucketedType", "boundaries": list(range(1, buckets))}}
    return {**RECIPE, "dataTypeContent": ages} if buckets != 8 else RECIPE


def setup(count: int, buckets: int = 8) -> list[str]:
    """A fleet of real devices, an approved analysis, and ``count`` open rounds; their collection keys."""
    from django.conf import settings
    from django.contrib.auth.models import User

    from analyses.models import Recipe
    from analyses.rules.roles import make_privacy_officer
    from analyses.services.policy import analysis_approve, analysis_create
    from analyses.services.recipes import recipe_create
    from analyses.services.rounds import round_start
    from devices.credentials import devices_register

    analyst = User.objects.create_user("bench-analyst", password="bench-analyst-password")
    officer = User.objects.create_user("bench-officer", password="bench-officer-password")
    make_privacy_officer(officer)
    # The bench plays the attestation authority too (its settings hold a development key under DEBUG).
    devices_register(fleet_name="bench-phones", attestations=_attestations(settings.PFS_ATTESTATION_KEY, 1000))
    spec = {
        "identifier": "bench.uploads",
        "fleet": "bench-phones",
        "queryClass": {"stream": "KeyboardNGrams", "fields": ["age"], "cohortFields": []},
        "budget": {"epsilon": 100.0, "reports": 100, "delta": 1e-6},
        "fields": {"age": {"localEpsilon": 4.0, "epsilon": 100.0, "reports": 100}},
    }
    analysis = analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    keys = []
    for index in range(count):
        content = {**recipe_for(buckets), "recipeIdentifier": f"r{index}"}
        recipe = recipe_create(analysis=analysis, content=content, user=analyst)
        assert isinstance(recipe, Recipe)
        # A bench fleet of 1,000 devices over up to 1,024 buckets is noisier than an analyst would
        # want: the bench measures throughput, so it answers the product's question with yes.
        keys.append(round_start(recipe=recipe, user=analyst, confirm_small_cohorts=True).task_key)
    return keys


def write_bodies(collection_key: str, count: int, buckets: int = 8, timings: list | None = None) -> Path:
    """``count`` upload bodies for the collection, one per line, sealed by the device code on every core.

    ``timings``: extended with each report's sealing CPU time (seconds), when given.
    """
    import multiprocessing

    from aggregation import helper_client
    from aggregation.aggregators import LEADER
    from aggregation.issuer import issuer_key

    key = issuer_key(collection_key)  # the collection's own token key
    helper = helper_client.public_key()  # as the helper's service serves it (the leader has no other)
    job = (collection_key, LEADER.public_key(), helper, key.public.modulus, key.public.exponent, buckets)
    private = (key.prime_p, key.prime_q)
    chunks = [(job, private, start, min(500, count - start)) for start in range(0, count, 500)]
    with multiprocessing.get_context("fork").Pool(os.cpu_count()) as pool:
        sealed = pool.map(_seal_chunk, chunks)
    bodies = [body for chunk, _ in sealed for body in chunk]
    if timings is not None:
        timings.extend(t for _, chunk_times in sealed for t in chunk_times)
    path = VAR / f"bench-upload-{collection_key.replace('/', '_')}.bodies"
    path.write_bytes(b"".join(body + b"\n" for body in bodies))
    return path


def _seal_chunk(arguments) -> list[bytes]:
    import numpy as np

    from pfs_device.report_client import AggregatorKeys, report_seal, report_token_obtain, report_vector
    from pfs_device.tokens import IssuerPrivateKey, IssuerPublicKey, sign_blinded
    from pfs_device.wire import report_bytes
    from privacy.mechanisms import mechanism_get
    from privacy.report_vdaf import report_shape

    (collection_key, leader, helper, modulus, exponent, buckets), (p, q), start, count = arguments
    issuer = IssuerPrivateKey(IssuerPublicKey(modulus, exponent), p, q)
    mechanism, epsilon0 = RECIPE["privacy"]["mechanism"], RECIPE["privacy"]["epsilon0"]
    oracle = mechanism_get(mechanism, epsilon0)
    shape = report_shape(mechanism=mechanism, epsilon0=epsilon0, domain_size=buckets)
    rng = np.random.default_rng(start)
    keys = AggregatorKeys(leader=leader, helper=helper)
    bodies, seconds = [], []
    for value in rng.integers(0, buckets, size=count):
        vector = report_vector(oracle, int(value), buckets, rng)
        started = time.process_time()  # the device's work: Prio3 sharding with its proof, two HPKE seals
        sealed = report_seal(collection_key=collection_key, batch_key="", vector=vector, keys=keys, shape=shape)
        seconds.append(time.process_time() - started)
        # Its token names the sealed report (its digest), so it is asked for after the sealing.
        report = report_token_obtain(report=sealed, issuer=issuer.public, issue=lambda b: sign_blinded(issuer, b))
        bodies.append(report_bytes(report))
    return bodies, seconds


def upload_statements(bodies: Path) -> list[str]:
    """The SQL one upload costs once the collection's rules are cached (the second of two uploads)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from aggregation.intake import upload_answer

    first, second = bodies.read_bytes().splitlines()[:2]
    for body in (first, second):
        meta = {"REMOTE_ADDR": "127.0.0.1", "CONTENT_LENGTH": str(len(body))}
        with CaptureQueriesContext(connection) as queries:
            assert upload_answer(meta, lambda _size, body=body: body).status == 202
    return [_statement(q["sql"]) for q in queries.captured_queries]


def _statement(sql: str) -> str:
    """'SELECT aggregation_collectionrules', 'INSERT aggregation_pendingreport', ..."""
    words = sql.replace('"', "").split()
    verb = words[0].upper()
    table = next(
        (w for w, before in zip(words[1:], words, strict=False) if before.upper() in ("FROM", "INTO", "UPDATE")), ""
    )
    return f"{verb} {table.split('.')[-1]}".strip()


def counts(collection_key: str) -> dict[str, int]:
    from django.db.models import Sum

    from aggregation.models import LeaderShare, PendingReport
    from aggregation.reports import rejections

    accepted = LeaderShare.objects.filter(collection__key=collection_key).aggregate(n=Sum("reports"))["n"] or 0
    rejected = sum(rejections(collection_key).get("leader", {}).values())
    return {
        "pending": PendingReport.objects.filter(collection_key=collection_key).count(),
        "accepted": accepted,
        "rejected": rejected,
    }


def _attestations(authority: bytes, count: int) -> list[dict]:
    """``count`` fresh device keys' attestations, signed with the authority's key the bench plays."""
    from pfs_device.attestation import DeviceKey, attestation_sign

    return [attestation_sign(authority, DeviceKey.generate().public).as_json() for _ in range(count)]
