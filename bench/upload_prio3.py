"""bench/upload.py --prio3: verified ingestion of large Prio3 reports, timed, and where the time goes.

Run inside bench/upload.py's process once Django is set up (its imports wait for that).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from host import describe  # bench/host.py: this script's folder is on sys.path
from upload_setup import RECIPE, setup, write_bodies


def prio3_ingest(options) -> None:
    """Prio3 reports of ``options.prio3`` buckets: sealed by the device code, appended by the leader's
    upload code in this process, then verified by aggregation.ingest, timed; then where the time goes."""
    from aggregation.intake import upload_answer
    from aggregation.models import CollectionRules

    buckets, count = options.prio3, options.verify
    (key,) = setup(1, buckets=buckets)
    rules = CollectionRules.objects.get(key=key)
    load_start = os.getloadavg()
    seal_seconds: list[float] = []
    started = time.monotonic()
    bodies = write_bodies(key, count, buckets, seal_seconds).read_bytes().splitlines()
    sealing = time.monotonic() - started
    started = time.perf_counter()
    for body in bodies:  # the leader's append (aggregation.intake), as the endpoint runs it
        meta = {"REMOTE_ADDR": "127.0.0.1", "CONTENT_LENGTH": str(len(body))}
        assert upload_answer(meta, lambda _size, body=body: body).status == 202
    appended = time.perf_counter() - started

    import multiprocessing

    from django.db import connections

    from aggregation.ingest import IngestResult

    connections.close_all()  # each process opens its own
    load_before = os.getloadavg()
    context = multiprocessing.get_context("fork")
    global _BARRIER  # inherited by the forked processes (a Barrier cannot be sent to them)
    _BARRIER = context.Barrier(options.processes)
    with context.Pool(options.processes) as pool:
        runs = pool.map(_ingest_run, [key] * options.processes)
    load_after = os.getloadavg()
    result = IngestResult(
        accepted=sum(r["accepted"] for r in runs),
        rejected=sum(r["rejected"] for r in runs),
        chunks=sum(r["chunks"] for r in runs),
    )
    wall = max(r["wall"] for r in runs)
    cpu = sum(r["cpu"] for r in runs)
    assert result.accepted == count and result.rejected == 0, result
    phases = ingest_phases(rules, bodies[: min(count, 1000)])
    write_prio3(
        Path(options.out),
        options,
        rules=rules,
        sealing=sealing,
        seal_seconds=seal_seconds,
        appended=appended,
        result=result,
        wall=wall,
        cpu=cpu,
        phases=phases,
        loads=(load_start, load_before, load_after),
    )


_BARRIER = None


def _ingest_run(key: str) -> dict:
    """One verifying process (as one Celery worker process): reports_ingest from a common start."""
    from aggregation.ingest import reports_ingest

    _BARRIER.wait()
    wall, cpu = time.perf_counter(), time.process_time()
    result = reports_ingest(collection_key=key)
    return {
        "accepted": result.accepted,
        "rejected": result.rejected,
        "chunks": result.chunks,
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
    }


def ingest_phases(rules, bodies: list[bytes]) -> dict[str, float]:
    """CPU seconds per report of each step of reports_check, run step by step on ``bodies`` (one process)."""
    from aggregation.aggregators import AGGREGATORS, rules_shape
    from aggregation.ingest import _parse
    from aggregation.issuer import issuer_public_key
    from aggregation.verification import AggregatorVerification, VerifyConfig, output_sum, proofs_decide
    from pfs_device.tokens import verify
    from privacy.report_vdaf import report_nonce

    issuer = issuer_public_key(rules.key)
    keys = {a.role: a.private_key() for a in AGGREGATORS}
    config = VerifyConfig.of(collection_key=rules.key, shape=rules_shape(rules), verify_key=bytes(rules.verify_key))
    times: dict[str, float] = {}

    def timed(name: str, work):
        started = time.process_time()
        value = work()
        times[name] = (time.process_time() - started) / len(bodies)
        return value

    reports = timed("parse the JSON bodies", lambda: [_parse(body) for body in bodies])
    timed("token: RSA signature check", lambda: [verify(issuer, r.collection_key, r.token) for r in reports])
    opened = {}
    for aggregator in AGGREGATORS:
        opened[aggregator.role] = timed(
            f"{aggregator.role}: HPKE open",
            lambda a=aggregator: [
                a.open_share(
                    rules,
                    r.share_for(a.role).enc,
                    r.share_for(a.role).ciphertext,
                    batch_key=r.batch_key,
                    token_digest=r.token.digest,
                    public_share=r.public,
                    private_key=keys[a.role],
                )
                for r in reports
            ],
        )
    sides = {a.role: AggregatorVerification(a.role, config) for a in AGGREGATORS}
    nonces = [report_nonce(r.token.nonce) for r in reports]
    publics = [r.public for r in reports]
    shares = {
        role: timed(f"{role}: Prio3 verify_init", lambda s=side, o=opened[role]: s.start(nonces, publics, o))
        for role, side in sides.items()
    }
    messages = timed("leader: verifier message", lambda: proofs_decide(config, shares["leader"], shares["helper"]))
    for role, side in sides.items():
        accepted = timed(f"{role}: Prio3 verify_next", lambda s=side: s.finish(messages))
        assert all(accepted)
        timed(
            f"{role}: sum of output shares",
            lambda s=side: output_sum(config, [s.output_share(k) for k in range(len(reports))]),
        )
    return times


def write_prio3(path: Path, options, *, rules, sealing, seal_seconds, appended, result, wall, cpu, phases, loads):
    import statistics

    from aggregation.aggregators import rules_shape
    from privacy.report_vdaf import input_share_sizes

    shape = rules_shape(rules)
    vdaf = shape.vdaf()
    leader_bytes, helper_bytes, public_bytes = input_share_sizes(vdaf)
    version = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-tAc", "show server_version", "postgres"],
        capture_output=True,
        text=True,
    ).stdout.split()[0]
    rate, cpu_rate = result.verified / wall, result.verified / cpu
    median_ms = statistics.median(seal_seconds) * 1000
    worst_ms = max(seal_seconds) * 1000
    measured = sum(phases.values())
    lines = [
        "# Verified ingestion of Prio3 reports through both aggregators",
        "",
        f"Machine: {describe(tasks='in this process', memory=True, database=f'PostgreSQL {version}')}. "
        f"Command: `.venv/bin/python bench/upload.py --prio3 {options.prio3} --verify {options.verify} "
        f"--processes {options.processes}`. "
        "Load average (1, 5, 15 min): "
        + "; ".join(
            f"{label} {' '.join(f'{x:.2f}' for x in load)}"
            for label, load in zip(("at the start", "before the verification", "after it"), loads, strict=True)
        )
        + ". The machine is shared with other jobs: a load above 2 means they took part of the 2 cores.",
        "",
        f"A round of {shape.length:,} buckets, asymmetric OHE at epsilon0 = {RECIPE['privacy']['epsilon0']:g}: "
        f"Prio3MultihotCountVec of length {shape.length:,}, max_weight {vdaf.flp.valid.max_weight} (the recipe's "
        f"weight bound), chunk_length {vdaf.flp.valid.chunk_length}; a proof of {vdaf.flp.PROOF_LEN} field elements. "
        f"Upload: leader share {leader_bytes:,} bytes, helper share {helper_bytes} bytes, public share "
        f"{public_bytes} bytes (before HPKE and base64).",
        "",
        "## The device: report_seal per report",
        "",
        f"{len(seal_seconds):,} reports sealed by `pfs_device.report_client.report_seal` (Prio3 sharding with its "
        f"proof, two HPKE seals) on {os.cpu_count()} processes, CPU time per report: median {median_ms:.1f} ms, "
        f"worst {worst_ms:.1f} ms (target: 50 ms). The whole sealing, tokens included, took {sealing:.0f} s.",
        "",
        "## The aggregators: aggregation.ingest",
        "",
        f"{options.verify:,} reports appended by the leader's upload code (`aggregation.intake.upload_answer`, "
        f"in this process: {options.verify / appended:,.0f}/s), then `reports_ingest` in {options.processes} "
        "processes started together (as a Celery worker's processes: each takes other chunks, `FOR UPDATE "
        f"SKIP LOCKED`): {result.accepted:,} accepted in {result.chunks} chunks of at most 500, {wall:.1f} s: "
        f"**{rate:,.0f} reports/s by the wall clock**; {cpu_rate:,.0f}/s per process by its CPU time, what a "
        "core of its own gives (target: 1,000 reports/s on the 2 cores). Every check of every report: the token's signature and "
        "spent record, each aggregator's HPKE open, both aggregators' Prio3 verification (leader and "
        "helper each with its own state), the sums of the output shares, the spent tokens and one commit "
        "per chunk.",
        "",
        "## Where the time goes",
        "",
        f"The steps of the verification run one by one on {min(options.verify, 1000):,} of the reports in this "
        "process (CPU ms per report; no database):",
        "",
        "| step | CPU ms/report | share |",
        "|---|---:|---:|",
    ]
    for name, seconds in phases.items():
        lines.append(f"| {name} | {seconds * 1000:.3f} | {seconds / measured:.0%} |")
    lines += [
        f"| **all steps** | **{measured * 1000:.3f}** | |",
        f"| reports_ingest (the database included) | {cpu / result.verified * 1000:.3f} | |",
        "",
    ]
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


# ---------------------------------------------------------------- the table

# What the numbers mean; rewrite it when they move.
