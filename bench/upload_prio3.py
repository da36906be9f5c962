"""bench/upload.py --prio3: verified ingestion of large Prio3 reports, timed, and where the time goes.

Run inside bench/upload.py's process once Django is set up (its imports wait for that).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from host import describe, machine_cpu_seconds  # bench/host.py: this script's folder is on sys.path
from upload_setup import RECIPE, setup, write_bodies


def prio3_ingest(options, helper, helper_key: bytes) -> None:
    """Prio3 reports of ``options.prio3`` buckets: sealed by the device code, appended by the leader's
    upload code in this process, then verified by aggregation.ingest in ``options.processes`` leader
    processes, each job at the helper's service (``helper``, bench/host.py) over HTTP, timed; then
    where the time goes (``helper_key``: the helper's private key, for its steps)."""
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
    helper_cpu = helper.cpu_seconds()
    machine = machine_cpu_seconds()
    context = multiprocessing.get_context("fork")
    global _BARRIER  # inherited by the forked processes (a Barrier cannot be sent to them)
    _BARRIER = context.Barrier(options.processes)
    with context.Pool(options.processes) as pool:
        runs = pool.map(_ingest_run, [key] * options.processes)
    load_after = os.getloadavg()
    helper_cpu = helper.cpu_seconds() - helper_cpu
    busy, every = (after - before for after, before in zip(machine_cpu_seconds(), machine, strict=True))
    result = IngestResult(
        accepted=sum(r["accepted"] for r in runs),
        rejected=sum(r["rejected"] for r in runs),
        chunks=sum(r["chunks"] for r in runs),
    )
    wall = max(r["wall"] for r in runs)
    cpu = sum(r["cpu"] for r in runs)
    assert result.accepted == count and result.rejected == 0, result
    phases = ingest_phases(rules, bodies[: min(count, 1000)], helper_key)
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
        helper_cpu=helper_cpu,
        busy=busy / every,
        phases=phases,
        loads=(load_start, load_before, load_after),
    )


_BARRIER = None


def _ingest_run(key: str) -> dict:
    """One verifying process (as one Celery worker process): reports_ingest from a common start.
    With ``PFS_BENCH_PROFILE=<path>`` it runs under cProfile, saved to ``<path>.<pid>``."""
    import cProfile

    from aggregation.flp_query_jit import warm
    from aggregation.ingest import reports_ingest

    warm()  # as a long-running worker has: its first verification loads the compiled loop
    profile = cProfile.Profile() if os.environ.get("PFS_BENCH_PROFILE") else None
    _BARRIER.wait()
    wall, cpu = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    result = reports_ingest(collection_key=key)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if profile is not None:
        profile.disable()
        profile.dump_stats(f"{os.environ['PFS_BENCH_PROFILE']}.{os.getpid()}")
    return {"accepted": result.accepted, "rejected": result.rejected, "chunks": result.chunks, "wall": wall, "cpu": cpu}


def ingest_phases(rules, bodies: list[bytes], helper_key: bytes) -> dict[str, float]:
    """CPU seconds per report of each step of an aggregation job on ``bodies``, one step at a time in
    this process: the leader's as aggregation.reports runs them, the job's request and answer encoded
    and parsed as they cross, and the helper's as aggregation.helper_service runs them, with the
    helper's key (the bench made it and gave it to the helper's service). Not here: the HTTP
    exchange, the queries and the commits of either side."""
    from aggregation import dap
    from aggregation.aggregators import HELPER, LEADER, rules_shape, token_valid
    from aggregation.flp_query_jit import warm
    from aggregation.helper_service import _token_valid
    from aggregation.ingest import _parse
    from aggregation.issuer import issuer_public_key
    from aggregation.reports import verify_init_of
    from aggregation.verification import AggregatorVerification, VerifyConfig, output_sum, proofs_decide
    from pfs_device import wire
    from pfs_device.tokens import Token
    from privacy.report_vdaf import report_nonce

    issuer = issuer_public_key(rules.key)
    config = VerifyConfig.of(collection_key=rules.key, shape=rules_shape(rules), verify_key=bytes(rules.verify_key))
    leader_key = LEADER.private_key()
    times: dict[str, float] = {}

    def timed(name: str, work):
        started = time.process_time()
        value = work()
        times[name] = (time.process_time() - started) / len(bodies)
        return value

    # The leader: the upload parsed, its own checks, then the job's request.
    reports = timed("leader: parse the JSON bodies", lambda: [_parse(body) for body in bodies])
    timed(
        "leader: token, report digest and RSA signature check",
        lambda: [
            token_valid(issuer, r.collection_key, r.token, version=r.version, report_digest=wire.report_digest_of(r))
            for r in reports
        ],
    )
    leader_opened = timed(
        "leader: HPKE open",
        lambda: [LEADER.open_report(rules, r, private_key=leader_key) for r in reports],
    )
    leader = AggregatorVerification("leader", config)
    nonces = [report_nonce(r.token.nonce) for r in reports]
    warm()  # untimed: the first verification in a process loads (or compiles) the compiled loop
    leader_shares = timed(
        "leader: Prio3 verify_init", lambda: leader.start(nonces, [r.public for r in reports], leader_opened)
    )
    request = timed(
        "leader: the job's request encoded (JSON, base64)",
        lambda: dap.encode(
            dap.AggregationJobInitReq(
                collection=rules.key,
                min_cohort=rules.min_cohort,
                verify_inits=[verify_init_of(r, s, 0.0) for r, s in zip(reports, leader_shares, strict=True)],
            )
        ),
    )
    # The helper: the request parsed, its own checks, the decision, its answer.
    inits = timed("helper: the job's request parsed", lambda: dap.AggregationJobInitReq.parse(request).verify_inits)
    tokens = [
        Token(nonce=dap.unb64(i.token["nonce"], "nonce"), signature=dap.unb64(i.token["signature"], "s")) for i in inits
    ]
    publics = [dap.unb64(i.public_share, "public_share") for i in inits]
    sealed = [
        wire.SealedShare(
            dap.unb64(i.encrypted_input_share["enc"], "enc"), dap.unb64(i.encrypted_input_share["payload"], "payload")
        )
        for i in inits
    ]
    timed(
        "helper: token, report digest and RSA signature check",
        lambda: [
            _token_valid(rules, issuer, i, t, p, s) for i, t, p, s in zip(inits, tokens, publics, sealed, strict=True)
        ],
    )
    helper_opened = timed(
        "helper: HPKE open",
        lambda: [
            HELPER.open_share(
                rules,
                dap.unb64(i.encrypted_input_share["enc"], "enc"),
                dap.unb64(i.encrypted_input_share["payload"], "payload"),
                batch_key=i.batch,
                token_digest=i.report_id,
                public_share=public,
                private_key=helper_key,
                version=i.version,
            )
            for i, public in zip(inits, publics, strict=True)
        ],
    )
    helper = AggregatorVerification("helper", config)
    helper_shares = timed(
        "helper: Prio3 verify_init",
        lambda: helper.start([report_nonce(t.nonce) for t in tokens], publics, helper_opened),
    )
    messages = timed(
        "helper: verifier message (decides the proofs)",
        lambda: proofs_decide(config, [dap.unb64(i.payload, "payload") for i in inits], helper_shares),
    )
    _finish(timed, "helper", helper, messages, config, output_sum)
    answer = timed(
        "helper: the answer encoded",
        lambda: dap.encode(
            dap.AggregationJobResp(
                verify_resps=[
                    dap.VerifyResp(report_id=i.report_id, type=dap.CONTINUE, payload=dap.b64(m))
                    for i, m in zip(inits, messages, strict=True)
                ]
            )
        ),
    )
    # The leader again: the answer parsed, its verify_next and its sum.
    received = timed(
        "leader: the answer parsed",
        lambda: [dap.unb64(r.payload, "payload") for r in dap.AggregationJobResp.parse(answer).verify_resps],
    )
    _finish(timed, "leader", leader, received, config, output_sum)
    return times


def _finish(timed, role: str, side, messages: list[bytes], config, output_sum) -> None:
    """One aggregator's verify_next on every report, all accepted, then the sum of its output shares."""
    accepted = timed(f"{role}: Prio3 verify_next", lambda: side.finish(messages))
    assert all(accepted)
    timed(
        f"{role}: sum of output shares",
        lambda: output_sum(config, [side.output_share(k) for k in range(len(messages))]),
    )


def write_prio3(
    path: Path, options, *, rules, sealing, seal_seconds, appended, result, wall, cpu, helper_cpu, busy, phases, loads
):
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
    rate = result.verified / wall
    leader_ms, helper_ms = cpu / result.verified * 1000, helper_cpu / result.verified * 1000
    median_ms = statistics.median(seal_seconds) * 1000
    worst_ms = max(seal_seconds) * 1000
    measured = sum(phases.values())
    lines = [
        "# Verified ingestion of Prio3 reports through both aggregators",
        "",
        f"Machine: {describe(tasks='in this process', memory=True, database=f'PostgreSQL {version}')}; "
        "the helper aggregator as its own service on the same machine (gunicorn, `pfs_web.settings_helper`, "
        "2 sync workers, its own PostgreSQL database). "
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
        "## The aggregators: aggregation.ingest, the helper over HTTP",
        "",
        f"{options.verify:,} reports appended by the leader's upload code (`aggregation.intake.upload_answer`, "
        f"in this process: {options.verify / appended:,.0f}/s), then `reports_ingest` in {options.processes} "
        "leader processes started together (as a Celery worker's processes: each takes other chunks, `FOR UPDATE "
        "SKIP LOCKED`), each chunk one aggregation job at the helper's service over HTTP "
        f"(`PFS_HELPER_TRANSPORT=http`): {result.accepted:,} accepted in {result.chunks} chunks of at most 500, "
        f"{wall:.2f} s: **{rate:,.0f} reports/s by the wall clock** through both aggregators, two services on the "
        f"2 cores (issue 28's target: 1,500/s). CPU per report: the leader's processes {leader_ms:.3f} ms, the "
        f"helper's {helper_ms:.3f} ms (its gunicorn processes, read from /proc), {leader_ms + helper_ms:.3f} ms "
        f"in all. The machine's cores were {busy:.0%} busy meanwhile (/proc/stat: the services, PostgreSQL and "
        "anything else). Every check of every report: the token's signature and spent record, each aggregator's HPKE "
        "open, both aggregators' Prio3 verification (each with its own state, the helper deciding the proofs), "
        "the sums of the output shares, the spent tokens, and each side's commit per chunk. Each process had "
        "loaded the compiled FLP query (`aggregation.flp_query_jit`) before the start, as a running "
        "worker has: the leader's on their own, the helper's gunicorn before it forked its workers (gunicorn.conf.py).",
        "",
        "## Where the time goes",
        "",
        f"The steps of an aggregation job run one by one on {min(options.verify, 1000):,} of the reports in this "
        "process, both sides (the helper's with its key, which the bench made for its service), with the job's "
        "request and answer encoded and parsed as they cross; CPU ms per report; no HTTP, no database:",
        "",
        "| step | CPU ms/report | share |",
        "|---|---:|---:|",
    ]
    for name, seconds in phases.items():
        lines.append(f"| {name} | {seconds * 1000:.3f} | {seconds / measured:.0%} |")
    lines += [
        f"| **all steps** | **{measured * 1000:.3f}** | |",
        f"| reports_ingest: the leader's processes and the helper's, HTTP and databases included "
        f"| {leader_ms + helper_ms:.3f} | |",
        "",
    ]
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


# ---------------------------------------------------------------- the table

# What the numbers mean; rewrite it when they move.
