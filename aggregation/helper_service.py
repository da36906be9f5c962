"""The helper aggregator's part, as its own service runs it (pfs_web.settings_helper, aggregation.helper_api).

Everything here reads and writes the helper's store only, with the helper's own keys and rules:

- ``task_provision``: the collection's configuration, once; a second one that differs is refused
  (nothing the leader sends later can lower what the helper enforces);
- ``job_run``: an aggregation job (aggregation.dap). For each report the helper checks the token
  (the issuer's signature with the key it was provisioned with, over the report as the helper
  holds it: pfs_device.wire.report_digest; not spent here), opens its own
  input share with its own private key, runs Prio3's verify_init on it, combines its verifier share
  with the leader's and decides the proof (DAP's ping-pong: the helper, not the leader, decides), then
  commits: its output shares summed per batch under the job's id, its spent tokens, its rejection
  counters, and its answer, in one transaction. A replay of the job's body gets that answer again;
  another body under the same id is a conflict;
- ``simulated_store``: a simulated shard's pre-summed shares, for a simulated fleet's collection only;
- ``aggregate_share``: the collection closes; each batch's sum of the pairs the leader names, with
  the helper's own noise, or a refusal (below the minimum cohort — the largest of the task's, the
  devices' and the helper's own floor — or flooded); answered once: the same request gets the same
  answer, any other a conflict.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Set
from dataclasses import dataclass, replace

import numpy as np
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from aggregation import dap
from aggregation.aggregators import HELPER, REPORT_SOURCE, AggregateShare, rules_shape, share_sizes_of, token_valid
from aggregation.batch_rules import ARRIVAL_GRAIN, arrival_coarse
from aggregation.models import (
    FIELD64,
    FIELD128,
    Collection,
    CollectionRules,
    HelperJob,
    HelperRelease,
    HelperShare,
    Poplar1Job,
    Poplar1Report,
    ReportRejection,
    SpentToken,
)
from aggregation.reports import (
    COLLECTION_CLOSED,
    PROOF_INVALID,
    SHARE_MALFORMED,
    SHARE_UNOPENED,
    TOKEN_INVALID,
    TOKEN_REUSED,
    UNKNOWN_COLLECTION,
)
from aggregation.statements import IssuedStatement, StatementInvalid, statement_verify
from aggregation.upload import share_store
from aggregation.verification import AggregatorVerification, VerifyConfig, output_sum, proofs_decide
from pfs_base import metrics
from pfs_base.errors import Conflict, NotAllowed
from pfs_device import hpke, tokens, wire
from privacy.heavy_hitters import level_sigma
from privacy.report_vdaf import report_nonce
from privacy.vdaf.field import Field128

STORE = HELPER.store
POPLAR1 = "poplar1"  # aggregation.heavy_hitters.VDAF


class UnknownTask(LookupError):
    """DAP's unrecognizedTask: the helper was never configured for the collection."""


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _rules(collection_key: str) -> CollectionRules:
    rules = CollectionRules.objects.using(STORE).filter(key=collection_key).first()
    if rules is None:
        raise UnknownTask(f"the helper has no task for collection {collection_key}")
    if rules.vdaf == POPLAR1:  # its reports are verified level by level (aggregation.heavy_hitters_helper)
        raise NotAllowed("a Poplar1 collection takes no Prio3 job, share or release")
    return rules


def _config_fields(config: dap.TaskConfig) -> dict:
    return {
        "length": config.length,
        "min_cohort": config.min_cohort,
        "weight_bound": config.weight_bound,
        "vdaf": config.vdaf,
        "verify_key": dap.unb64(config.verify_key, "verify_key"),
        "noise_epsilon": config.noise_epsilon,
        "noise_delta": config.noise_delta,
        "token_key": config.token_key,
        "levels": config.levels,
    }


# ------------------------------------------------------------------ the task


def task_provision(config: dap.TaskConfig) -> bool:
    """Store the collection's configuration; True when new. The same configuration again changes
    nothing; a different one is a Conflict (a leader cannot lower the minimum cohort, drop the
    noise or swap the token key of a collection once the helper has it)."""
    from privacy.report_vdaf import KINDS  # the kinds a device can be asked for

    sigma = None
    if config.vdaf == POPLAR1:
        # Poplar1's counts are exact without the aggregators' noise: the helper takes no such task,
        # nor one whose number of levels (what its noise is calibrated for) is open.
        if config.noise_epsilon is None or not config.noise_delta or config.levels is None:
            raise NotAllowed("a Poplar1 task needs aggregator noise (epsilon, delta > 0) and its number of levels")
        try:  # the helper's own calibration, once, never the leader's word
            sigma = level_sigma(config.noise_epsilon, config.noise_delta, config.levels)
        except ValueError as error:
            raise NotAllowed(f"a Poplar1 task's noise: {error}") from None
    elif config.vdaf not in KINDS:
        raise NotAllowed(f"unknown report kind {config.vdaf!r}")
    elif config.levels is not None:
        raise NotAllowed("levels: only a Poplar1 task has levels")
    if config.token_key is None and not settings.PFS_HELPER_ACCEPT_SIMULATED:
        raise NotAllowed("this helper takes no simulated fleet's collection (PFS_HELPER_ACCEPT_SIMULATED is off)")
    fields = _config_fields(config)
    with transaction.atomic(using=STORE):
        existing = CollectionRules.objects.using(STORE).select_for_update().filter(key=config.collection).first()
        if existing is None:
            try:
                with transaction.atomic(using=STORE):
                    CollectionRules.objects.using(STORE).create(key=config.collection, noise_sigma=sigma, **fields)
                return True
            except IntegrityError:  # provisioned at the same moment by a retry: compare with it
                existing = CollectionRules.objects.using(STORE).get(key=config.collection)
        held = {name: getattr(existing, name) for name in fields}
        held["verify_key"] = bytes(held["verify_key"])
        if held != fields:
            changed = sorted(name for name in fields if held[name] != fields[name])
            raise Conflict(f"the helper's task for this collection is configured otherwise ({', '.join(changed)})")
        return False


def task_discard(collection_key: str) -> None:
    """A collection that will never be released: closed, and every share and job of it dropped."""
    with transaction.atomic(using=STORE):
        CollectionRules.objects.using(STORE).filter(key=collection_key).update(closed=True)
        HelperShare.objects.using(STORE).filter(collection__key=collection_key).delete()
        Collection.objects.using(STORE).filter(key=collection_key).delete()
        HelperJob.objects.using(STORE).filter(collection_key=collection_key).delete()
        # A Poplar1 collection's input shares and jobs; the record of its released levels stays.
        Poplar1Report.objects.using(STORE).filter(collection_key=collection_key).delete()
        Poplar1Job.objects.using(STORE).filter(collection_key=collection_key).delete()


# ------------------------------------------------------------------ aggregation jobs


def job_run(collection_key: str, job: str, body: bytes) -> bytes:
    """An aggregation job's AggregationJobResp, encoded: computed and committed once, replayed after."""
    digest = _digest(body)
    replay = job_answer(collection_key, job, digest)
    if replay is not None:
        return replay
    request = dap.AggregationJobInitReq.parse(body)
    if request.collection != collection_key:
        raise dap.MessageError("collection: the body names another collection than the path")
    rules = _rules(collection_key)
    # The costly part (HPKE opens, Prio3 verification) runs before the lock, so that jobs of one
    # collection verify side by side: under the lock a leader's concurrent jobs took turns, leaving
    # a core idle. What the verdicts read that others write (the closed flag, the spent tokens) is
    # read again under the lock; if it changed, the job is verified again there.
    seen = _Seen.of(rules, request.verify_inits)
    verdict = _job_verify(rules, request, job, seen.spent)
    try:
        with transaction.atomic(using=STORE):
            # The rules row, locked: a job's commit and the aggregate share request never interleave.
            rules = CollectionRules.objects.using(STORE).select_for_update().get(pk=rules.pk)
            replay = job_answer(collection_key, job, digest)
            if replay is not None:
                return replay
            now = _Seen.of(rules, request.verify_inits)
            if now != seen:
                verdict = _job_verify(rules, request, job, now.spent)
            resps, counts, sums, spent = verdict
            answer = dap.encode(dap.AggregationJobResp(verify_resps=resps))
            HelperJob.objects.using(STORE).create(
                collection_key=collection_key, job=job, request_digest=digest, response=answer
            )
            _job_commit(rules, job, request, sums, spent, counts)
    except IntegrityError:  # the same job committed by a concurrent request: answer as it did
        replay = job_answer(collection_key, job, digest)
        if replay is None:
            raise
        return replay
    metrics.helper_job_counted(
        accepted=sum(len(times) for _, times in sums.values()), rejected={r: n for (_, r), n in counts.items()}
    )
    return answer


def job_answer(collection_key: str, job: str, digest: str) -> bytes | None:
    stored = HelperJob.objects.using(STORE).filter(collection_key=collection_key, job=job).first()
    if stored is None:
        return None
    if stored.request_digest != digest:
        raise Conflict(f"aggregation job {job} exists with another request (a job id is used once)")
    return bytes(stored.response)


@dataclass(frozen=True)
class _Seen:
    """What a job's verdicts read of the helper's store that other requests change: whether the
    collection is closed, and which of the job's tokens are spent."""

    closed: bool
    spent: frozenset[str]

    @classmethod
    def of(cls, rules: CollectionRules, inits: list[dap.VerifyInit]) -> _Seen:
        return cls(closed=rules.closed, spent=frozenset(spent_digests(rules, inits)))


def _job_verify(
    rules: CollectionRules, request: dap.AggregationJobInitReq, job: str, spent: frozenset[str]
) -> tuple[list[dap.VerifyResp], Counter, dict[str, tuple[list[bytes], list[float]]], list[str]]:
    """The helper's verdict on each report of a job, with nothing written: the answers, the
    rejections by (role, reason), each batch's accepted output shares and arrival times, the tokens
    to record spent. ``spent``: which of the job's tokens the helper's store holds spent."""
    inits = request.verify_inits
    plain: dict[int, tuple[bytes, bytes]] = {}
    if rules.closed:
        reasons = dict.fromkeys(range(len(inits)), COLLECTION_CLOSED)
    else:
        reasons, plain = open_checks(rules, inits, spent)
    opened = sorted(plain)
    sums: dict[str, tuple[list[bytes], list[float]]] = defaultdict(lambda: ([], []))
    messages: dict[int, bytes] = {}
    config = VerifyConfig.of(collection_key=rules.key, shape=rules_shape(rules), verify_key=bytes(rules.verify_key))
    if opened:
        side = AggregatorVerification("helper", config)
        nonces = [_nonce(inits[i]) for i in opened]
        mine = side.start(nonces, [plain[i][0] for i in opened], [plain[i][1] for i in opened])
        leaders = [_payload(inits[i]) for i in opened]
        decided = proofs_decide(config, leaders, mine)
        accepted = side.finish(decided)
        for k, i in enumerate(opened):
            if not accepted[k]:
                reasons[i] = PROOF_INVALID
                continue
            messages[i] = decided[k]  # type: ignore[assignment]
            shares, times = sums[inits[i].batch]
            shares.append(side.output_share(k))
            times.append(inits[i].time)
    resps = [
        dap.VerifyResp(report_id=init.report_id, type=dap.REJECT, report_error=reasons[i])
        if i in reasons
        else dap.VerifyResp(report_id=init.report_id, type=dap.CONTINUE, payload=dap.b64(messages[i]))
        for i, init in enumerate(inits)
    ]
    counts = Counter(("helper", reason) for reason in reasons.values())
    spent = [init.report_id for i, init in enumerate(inits) if i in messages and init.token is not None]
    summed = {batch: ([output_sum(config, shares)], times) for batch, (shares, times) in sums.items()}
    return resps, counts, summed, spent


def _nonce(init: dap.VerifyInit) -> bytes:
    if init.token is not None:
        return report_nonce(dap.unb64(init.token["nonce"], "token.nonce"))
    return bytes.fromhex(init.report_id)  # a simulated report's id is its nonce


def _payload(init: dap.VerifyInit) -> bytes | None:
    try:
        return dap.unb64(init.payload, "payload")
    except dap.MessageError:
        return None


def spent_digests(rules: CollectionRules, inits: list[dap.VerifyInit]) -> set[str]:
    """Which of these reports' tokens the helper's store holds spent."""
    digests = [init.report_id for init in inits if init.token is not None]
    if not digests:
        return set()
    return set(
        SpentToken.objects.using(STORE)
        .filter(role="helper", collection_key=rules.key, token_digest__in=digests)
        .values_list("token_digest", flat=True)
    )


def open_checks(
    rules: CollectionRules, inits: list[dap.VerifyInit], spent: Set[str] | None = None
) -> tuple[dict[int, str], dict[int, tuple[bytes, bytes]]]:
    """Each report's token and input share, checked and opened by the helper alone: why each one it
    refuses is refused, and (public share, input share) of each it opened, by report index.
    ``spent``: which of their tokens are spent, when the caller has read it (else read here)."""
    reasons: dict[int, str] = {}
    opened: dict[int, tuple[bytes, bytes]] = {}
    simulated = rules.token_key is None
    issuer = None if simulated else tokens.IssuerPublicKey(int(rules.token_key["n"]), int(rules.token_key["e"]))
    if spent is None:
        spent = spent_digests(rules, inits)
    private_key = HELPER.private_key() if not simulated else b""
    expected = share_sizes_of(rules)[1]
    for i, init in enumerate(inits):
        if simulated != (init.token is None):  # a device's report in a simulated collection, or the reverse
            reasons[i] = UNKNOWN_COLLECTION
            continue
        try:
            public = dap.unb64(init.public_share, "public_share")
        except dap.MessageError:
            reasons[i] = SHARE_MALFORMED
            continue
        if simulated:
            try:
                share = dap.unb64(init.input_share, "input_share")
                reason = None if len(share) == expected else SHARE_MALFORMED
            except dap.MessageError:
                reason = SHARE_MALFORMED
        else:
            reason, share = _token_and_share(rules, issuer, init, public, spent, private_key)
        if reason is None:
            opened[i] = (public, share)
        else:
            reasons[i] = reason
    return reasons, opened


def _token_and_share(
    rules: CollectionRules,
    issuer: tokens.IssuerPublicKey,
    init: dap.VerifyInit,
    public: bytes,
    spent: Set[str],
    private_key: bytes,
) -> tuple[str | None, bytes]:
    try:
        token = tokens.Token(
            nonce=dap.unb64(init.token["nonce"], "token.nonce"),
            signature=dap.unb64(init.token["signature"], "token.signature"),
        )
    except dap.MessageError:
        return TOKEN_INVALID, b""
    try:
        sealed = wire.SealedShare(
            enc=dap.unb64(init.encrypted_input_share["enc"], "enc"),
            ciphertext=dap.unb64(init.encrypted_input_share["payload"], "payload"),
        )
    except dap.MessageError:
        return SHARE_MALFORMED, b""
    if token.digest != init.report_id or not _token_valid(rules, issuer, init, token, public, sealed):
        return TOKEN_INVALID, b""
    # Only after the signature: a token on another report than its own spends nothing here.
    if token.digest in spent:
        return TOKEN_REUSED, b""
    try:
        return None, HELPER.open_share(
            rules,
            sealed.enc,
            sealed.ciphertext,
            batch_key=init.batch,
            token_digest=token.digest,
            public_share=public,
            private_key=private_key,
            version=init.version,
        )
    except hpke.OpenFailed:
        return SHARE_UNOPENED, b""
    except ValueError:  # a share of the wrong length
        return SHARE_MALFORMED, b""


def _token_valid(
    rules: CollectionRules,
    issuer: tokens.IssuerPublicKey,
    init: dap.VerifyInit,
    token: tokens.Token,
    public: bytes,
    sealed: wire.SealedShare,
) -> bool:
    """The token's signature over the report as the helper holds it: its own sealed share, the
    public share and the batch, and the leader's share as the digest the leader sent. A leader that
    puts a device's token on other content — another helper share, public share or batch, or a
    leader share it made up — gets a digest the token does not sign."""
    if init.version != wire.VERSION:  # a report stored before the upgrade: its token signs no report
        return token_valid(issuer, rules.key, token, version=init.version, report_digest=b"")
    try:
        leader_digest = dap.unb64(init.leader_share_digest, "leader_share_digest")
        digest = wire.report_digest(
            batch_key=init.batch,
            public=public,
            leader_share_digest=leader_digest,
            helper_share_digest=wire.share_digest(sealed),
        )
    except ValueError:  # none sent (dap.MessageError), or not a digest's length
        return False
    return token_valid(issuer, rules.key, token, version=init.version, report_digest=digest)


def _job_commit(
    rules: CollectionRules,
    job: str,
    request: dap.AggregationJobInitReq,
    sums: dict[str, tuple[list[bytes], list[float]]],
    spent: list[str],
    counts: Counter,
) -> None:
    """The job's part in the helper's store (inside its transaction): one share per batch under the
    job's id, the spent tokens, the rejection counters."""
    field = FIELD128 if rules_shape(rules).vdaf().field is Field128 else FIELD64
    for batch, (summed, times) in sorted(sums.items()):
        share_store(
            store=STORE,
            collection_key=rules.key,
            batch_key=batch,
            length=rules.length,
            pair=job,
            # Rate validation reads the arrivals of devices' reports (REPORT_SOURCE) only.
            source=f"{REPORT_SOURCE}{job}" if rules.token_key is not None else f"simulated:{job}",
            vector=summed[0],
            field=field,
            reports=len(times),
            min_cohort=max(rules.min_cohort, request.min_cohort),
            # No finer than the aggregators' grain, whatever time the leader sent.
            arrivals=np.asarray([t - t % ARRIVAL_GRAIN for t in times], dtype="<f8").tobytes(),
            check_open=False,
        )
    spent_and_rejected_store(rules, job, spent, counts)


def spent_and_rejected_store(rules: CollectionRules, job: str, spent: list[str], counts: Counter) -> None:
    """A job's spent tokens (under its id: a retry finds them) and its rejection counters, in the
    helper's store (inside the job's transaction)."""
    SpentToken.objects.using(STORE).bulk_create(
        SpentToken(role="helper", collection_key=rules.key, token_digest=digest, job=job) for digest in sorted(spent)
    )
    counters = ReportRejection.objects.using(STORE)
    for (role, reason), count in sorted(counts.items()):
        counter, _ = counters.get_or_create(role=role, collection_key=rules.key, reason=reason)
        counters.filter(pk=counter.pk).update(count=F("count") + count)


# ------------------------------------------------------------------ simulated fleets


def simulated_store(collection_key: str, request: dap.SimulatedSharesReq) -> None:
    """A simulated shard's helper shares of every batch, in one transaction. Only into a simulated
    fleet's collection (one the helper was provisioned with no token key for): a share the leader
    made up must never join the reports of real devices."""
    if request.collection != collection_key:
        raise dap.MessageError("collection: the body names another collection than the path")
    rules = _rules(collection_key)
    if rules.token_key is not None:
        raise NotAllowed("this collection takes devices' reports only, no simulated shares")
    with transaction.atomic(using=STORE):
        for share in request.shares:
            vector = dap.unb64(share.vector, "vector")
            if len(vector) != 8 * rules.length:
                raise dap.MessageError(f"a share of batch {share.batch!r} is not {rules.length} Field64 residues")
            share_store(
                store=STORE,
                collection_key=collection_key,
                batch_key=share.batch,
                length=rules.length,
                pair=share.pair,
                source=request.source,
                vector=vector,
                field=FIELD64,
                reports=share.reports,
                min_cohort=max(rules.min_cohort, share.min_cohort),
                check_open=True,
            )


# ------------------------------------------------------------------ aggregate shares


def aggregate_share(collection_key: str, body: bytes) -> bytes:
    """The AggregateShare of the batches the leader names, encoded: the collection closes, each
    batch is summed (the named pairs only) and noised, or refused; the shares are deleted. Answered
    once and kept: the same request again gets the same bytes (the same noise, no second draw)."""
    request = dap.AggregateShareReq.parse(body)
    # A retry may relay a newer statement of the issuer's: the same request all the same.
    digest = _digest(dap.encode(replace(request, issued_statement=None)))
    if request.collection != collection_key:
        raise dap.MessageError("collection: the body names another collection than the path")
    rules = _rules(collection_key)
    with transaction.atomic(using=STORE):
        CollectionRules.objects.using(STORE).select_for_update().filter(key=collection_key).update(closed=True)
        released = HelperRelease.objects.using(STORE).filter(collection_key=collection_key).first()
        if released is not None:
            if released.request_digest != digest:
                raise Conflict("the helper has released this collection's aggregate shares already")
            return bytes(released.response)
        # Raised before anything is summed or deleted: the transaction rolls the closing back too.
        issued = _issued(rules, request.issued_statement)
        results = HELPER.aggregate(
            collection_key,
            pairs={batch: tuple(pairs) for batch, pairs in request.batches.items()},
            floor=settings.PFS_HELPER_MIN_COHORT_FLOOR,
            issued=issued,
        )
        answer = dap.encode(dap.AggregateShareResp(batches={key: _batch_share(r) for key, r in results.items()}))
        HelperJob.objects.using(STORE).filter(collection_key=collection_key).delete()
        HelperRelease.objects.using(STORE).create(
            collection_key=collection_key, request_digest=digest, response=answer, created_at=arrival_coarse()
        )
    return answer


class StatementRefused(NotAllowed):
    """A collection of real devices asked for without a valid issuer statement (aggregation.statements)."""


def _issued(rules: CollectionRules, content: dict | None) -> int | None:
    """The tokens issued for a collection of real devices, from the issuer's statement the leader
    relayed, verified with the issuer's statement public key the helper was configured with (never
    the leader's word); None for a simulated fleet's collection, which has no tokens. StatementRefused
    for a missing, forged, stale or other collection's statement: fail closed, nothing written."""
    if rules.token_key is None:
        return None
    public_key = settings.PFS_ISSUER_STATEMENT_PUBLIC_KEY
    if public_key is None:
        raise StatementRefused("this helper has no issuer statement key (PFS_ISSUER_STATEMENT_PUBLIC_KEY)")
    if content is None:
        raise StatementRefused("a collection of real devices needs the token issuer's statement of its tokens")
    try:
        statement = IssuedStatement.from_json(content)
        statement_verify(public_key, statement, collection=rules.key, now=timezone.now())
    except StatementInvalid as invalid:
        raise StatementRefused(str(invalid)) from None
    return statement.issued


def _batch_share(result) -> dap.BatchShare:
    if isinstance(result, AggregateShare):
        if result.field == FIELD64:
            encoded = np.asarray(result.vector, dtype="<u8").tobytes()
        else:
            encoded = b"".join(int(v).to_bytes(16, "little") for v in result.vector)
        return dap.BatchShare(
            reports=result.reports,
            min_cohort=result.min_cohort,
            field=result.field,
            share=dap.b64(encoded),
            pairs=list(result.pairs),
        )
    return dap.BatchShare(
        reports=None, min_cohort=result.min_cohort, refused=result.reason, empty=result.empty, pairs=list(result.pairs)
    )
