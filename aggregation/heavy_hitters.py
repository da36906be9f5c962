"""Heavy hitters with Poplar1: what each aggregator, leader or helper, does alike, on its own store.

A Poplar1 collection (CollectionRules with vdaf "poplar1", ``length`` bits, ``levels`` levels in
all) keeps every report's input share at each aggregator (Poplar1Report). The collector walks the
prefix tree a level at a time; a level is opened with one aggregation parameter (its level and
candidate prefixes), its reports verified in jobs (the leader's side in
aggregation.heavy_hitters_leader, the helper's in aggregation.heavy_hitters_helper), and released
once: each aggregator adds its own discrete Gaussian noise (privacy.heavy_hitters.level_sigma) to
its aggregate share, and the counts are their sum.

Each aggregator refuses, on its own, whatever would let the collector learn more than the noise
allows (``level_refusal``): a level at or below one opened before (a report's correlated randomness
is used once per level, Poplar1's is_valid), a level more than a byte below the one before (or, first,
below the first byte), a second prefix set at an open level, more levels
than the noise was calibrated for, a level released twice, and prefixes that do not extend a prefix
released with at least the minimum cohort at the level before (a prefix set chosen to isolate a
device under a rare prefix). A release needs at least the minimum cohort of reports.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

import numpy as np
from django.db.models import Max

from aggregation.dap_poplar1 import MAX_PREFIXES
from aggregation.models import CollectionRules, Poplar1Job, Poplar1Level, Poplar1Report
from aggregation.reports import SHARE_MALFORMED
from pfs_base.errors import Conflict, NotAllowed
from privacy.gaussian import sample_discrete_gaussian
from privacy.heavy_hitters import BITS_PER_STEP, level_sigma, report_context
from privacy.heavy_hitters import VDAF as POPLAR1
from privacy.vdaf.errors import VdafError
from privacy.vdaf.poplar1 import AggParam, Poplar1, Prefix
from privacy.vdaf.poplar1_batch import verify_init_batch

VDAF = POPLAR1
LEADER, HELPER = 0, 1  # Poplar1's aggregator ids
REPORT_REPLAYED = "report_replayed"  # verified at this level or a deeper one already
REPORT_UNKNOWN = "report_unknown"
REPORT_REFUSED = "report_refused"  # failed a sketch before: it counts nowhere again
context = report_context  # Poplar1's application context of a collection (privacy.heavy_hitters)


def vdaf_of(rules: CollectionRules) -> Poplar1:
    if rules.vdaf != VDAF:
        raise NotAllowed(f"collection {rules.key} is not a Poplar1 collection")
    return Poplar1(rules.length)


def noise_rng() -> np.random.Generator | None:
    """None: the noise's bits come from the OS CSPRNG. Tests replace it to replay a draw."""
    return None


def prefix_key(prefix: Prefix) -> str:
    """A prefix as a string of 0s and 1s: how released counts are stored and compared."""
    return "".join("1" if bit else "0" for bit in prefix)


def agg_param_decode(vdaf: Poplar1, encoded: bytes) -> AggParam:
    """The aggregation parameter, refused unless Poplar1 itself would take it (sorted, distinct
    prefixes of the level's length)."""
    try:
        level, prefixes = vdaf.decode_agg_param(encoded)
    except VdafError as error:
        raise NotAllowed(f"the aggregation parameter does not decode: {error}") from None
    agg_param = (level, [tuple(prefix) for prefix in prefixes])
    if not prefixes or not vdaf.is_valid(agg_param, []):
        raise NotAllowed("the candidate prefixes must be distinct, sorted and of the level's length")
    return agg_param


def effective_min_cohort(rules: CollectionRules, floor: int = 0) -> int:
    return max(rules.min_cohort, floor)


# ------------------------------------------------------------------ the collection's rules


def level_refusal(store: str, rules: CollectionRules, agg_param: AggParam, encoded: bytes, floor: int = 0) -> None:
    """Raise NotAllowed (or Conflict) if this aggregator must not verify reports at ``agg_param``;
    nothing is written. ``encoded``: the parameter as sent, compared with the one the level was
    opened with."""
    level, prefixes = agg_param
    levels = Poplar1Level.objects.using(store).filter(collection_key=rules.key)
    opened = levels.filter(level=level).first()
    if opened is not None:
        if opened.released:
            raise NotAllowed(f"level {level} is released already: no report is verified at it again")
        if bytes(opened.agg_param) != encoded:
            raise Conflict(f"level {level} is open with another prefix set: a level is asked one question")
        return
    deepest = levels.aggregate(deepest=Max("level"))["deepest"]
    if deepest is not None and level <= deepest:
        raise NotAllowed(f"level {level} is not below level {deepest}, asked before: a level is never revisited")
    # At most a byte deeper than the level before (the first: within the first byte), so that the
    # minimum-cohort rule below holds at every byte of a prefix: no leap from a popular first byte
    # straight to a guessed whole string.
    if level - (-1 if deepest is None else deepest) > BITS_PER_STEP:
        raise NotAllowed(
            f"level {level} is more than {BITS_PER_STEP} bits below "
            + ("the root" if deepest is None else f"level {deepest}")
            + ": the walk goes down at most a byte a level"
        )
    if levels.filter(released=False).exists():
        raise NotAllowed("the level before is not released yet: one level at a time")
    if rules.levels is not None and levels.count() >= rules.levels:
        raise NotAllowed(f"the collection's {rules.levels} levels are spent: its noise covers no more")
    if len(prefixes) > MAX_PREFIXES:
        raise NotAllowed(f"at most {MAX_PREFIXES:,} candidate prefixes a level")
    before = levels.order_by("-level").first()
    if before is None:
        return
    minimum = effective_min_cohort(rules, floor)
    counts = before.counts or {}
    thin = [
        prefix_key(prefix) for prefix in prefixes if counts.get(prefix_key(prefix[: before.level + 1]), -1) < minimum
    ]
    if thin:
        raise NotAllowed(
            f"{len(thin)} candidate prefixes do not extend a prefix released at level {before.level} with at "
            f"least the minimum cohort of {minimum} (e.g. {thin[0]}): no prefix set may single out a few devices"
        )


def level_open(store: str, rules: CollectionRules, agg_param: AggParam, encoded: bytes) -> Poplar1Level:
    """The level's row, made when it is first asked (after level_refusal, in the caller's
    transaction); the collection takes no more reports from then on."""
    level = agg_param[0]
    row = Poplar1Level.objects.using(store).select_for_update().filter(collection_key=rules.key, level=level).first()
    if row is None:
        vdaf = vdaf_of(rules)
        row = Poplar1Level.objects.using(store).create(
            collection_key=rules.key,
            level=level,
            agg_param=encoded,
            agg_share=vdaf.encode_agg_share(agg_param, vdaf.agg_init(agg_param)),
        )
        CollectionRules.objects.using(store).filter(pk=rules.pk).update(closed=True)
    return row


# ------------------------------------------------------------------ verification, one side


@dataclass
class Prepared:
    """One aggregator's first step on a job's reports: by report id, its verification state and
    first verifier share, or why it refused the report."""

    states: dict[str, tuple]
    shares: dict[str, list[int]]
    refused: dict[str, str]


def prepare(
    store: str, rules: CollectionRules, agg_id: int, agg_param: AggParam, report_ids: list[str]
) -> tuple[Prepared, dict[str, Poplar1Report]]:
    """verify_init on each named report this aggregator holds and may verify at the level."""
    vdaf = vdaf_of(rules)
    level = agg_param[0]
    rows = {
        row.report_id: row
        for row in Poplar1Report.objects.using(store).filter(collection_key=rules.key, report_id__in=report_ids)
    }
    prepared = Prepared(states={}, shares={}, refused={})
    decoded: dict[str, tuple[bytes, object, object]] = {}
    for report_id in report_ids:
        row = rows.get(report_id)
        if row is None:
            prepared.refused[report_id] = REPORT_UNKNOWN
        elif row.refused:
            prepared.refused[report_id] = REPORT_REFUSED
        elif row.last_level >= level:
            prepared.refused[report_id] = REPORT_REPLAYED
        else:
            try:
                public = vdaf.decode_public_share(bytes(row.public_share))
                share = vdaf.decode_input_share(agg_id, bytes(row.input_share))
            except (VdafError, ValueError):
                prepared.refused[report_id] = SHARE_MALFORMED
                continue
            decoded[report_id] = (bytes(row.nonce), public, share)
    for report_id, result in _verify_init_all(
        vdaf, bytes(rules.verify_key), context(rules.key), agg_id, agg_param, decoded
    ):
        if result is None:
            prepared.refused[report_id] = SHARE_MALFORMED
        else:
            prepared.states[report_id], prepared.shares[report_id] = result
    return prepared, rows


def _verify_init_all(vdaf: Poplar1, verify_key: bytes, ctx: bytes, agg_id: int, agg_param: AggParam, decoded: dict):
    """verify_init of every decoded report, batched over them (privacy.vdaf.poplar1_batch); should
    the batch refuse, one at a time, so that one bad report refuses itself only."""
    ids = list(decoded)
    if not ids:
        return []
    nonces, publics, shares = zip(*(decoded[i] for i in ids), strict=True)
    try:
        return list(
            zip(ids, verify_init_batch(vdaf, verify_key, ctx, agg_id, agg_param, nonces, publics, shares), strict=True)
        )
    except (VdafError, ValueError):
        pass
    results = []
    for report_id, (nonce, public, share) in zip(ids, zip(nonces, publics, shares, strict=True), strict=True):
        try:
            results.append((report_id, vdaf.verify_init(verify_key, ctx, agg_id, agg_param, nonce, public, share)))
        except (VdafError, ValueError):
            results.append((report_id, None))
    return results


def sketch_check(vdaf: Poplar1, agg_param: AggParam, shares: list[list[int]]) -> bool:
    """Whether the two second-round shares add up to zero: the report is one path with one count."""
    try:
        vdaf.verifier_shares_to_message(b"", agg_param, shares)
    except VdafError:
        return False
    return True


def noised_share(vdaf: Poplar1, rules: CollectionRules, agg_param: AggParam, agg_share: bytes) -> list[int]:
    """This aggregator's aggregate share of the level with its own noise, calibrated so that the
    collection's levels compose within its (epsilon, delta) whatever the other aggregator adds."""
    sigma = noise_sigma(rules)
    share = vdaf.decode_agg_share(agg_param, agg_share)
    noise = sample_discrete_gaussian(sigma**2, len(share), noise_rng())
    p = vdaf.idpf.current_field(agg_param[0]).MODULUS
    return [(value + int(e)) % p for value, e in zip(share, noise, strict=True)]


def noise_sigma(rules: CollectionRules) -> float:
    """This aggregator's sigma a level: as it computed it when it took the collection, or now."""
    if rules.noise_epsilon is None or not rules.noise_delta or rules.levels is None:
        raise NotAllowed("a Poplar1 collection is released only with aggregator noise over a set number of levels")
    if rules.noise_sigma is not None:
        return rules.noise_sigma
    return level_sigma(rules.noise_epsilon, rules.noise_delta, rules.levels)


def released_counts(vdaf: Poplar1, agg_param: AggParam, shares: list[list[int]]) -> dict[str, int]:
    """The counts of the level's prefixes from the two noised shares (a noised count may be negative)."""
    p = vdaf.idpf.current_field(agg_param[0]).MODULUS
    total = vdaf.unshard(agg_param, shares, 0)
    return {prefix_key(prefix): v - p if v > p // 2 else v for prefix, v in zip(agg_param[1], total, strict=True)}


def share_add(vdaf: Poplar1, agg_param: AggParam, agg_share: bytes, out_shares: list[list[int]]) -> bytes:
    total = vdaf.merge(agg_param, [vdaf.decode_agg_share(agg_param, agg_share), *out_shares])
    return vdaf.encode_agg_share(agg_param, total)


def reports_drop_when_spent(store: str, rules: CollectionRules) -> bool:
    """Once the collection's last level is released, this aggregator's input shares of its reports
    (and the helper's jobs) are deleted: no question is left that they could answer. True if dropped."""
    released = Poplar1Level.objects.using(store).filter(collection_key=rules.key, released=True).count()
    if rules.levels is None or released < rules.levels:
        return False
    Poplar1Report.objects.using(store).filter(collection_key=rules.key).delete()
    if store != "default":
        Poplar1Job.objects.using(store).filter(collection_key=rules.key).delete()
    return True


def state_dump(states: dict[str, tuple[list[int], list[int]]]) -> bytes:
    """The helper's state between a job's two steps: by report, its check share and output share."""
    return json.dumps(states, sort_keys=True).encode()


def state_load(data: bytes) -> dict[str, tuple[list[int], list[int]]]:
    return {key: (value[0], value[1]) for key, value in json.loads(data).items()}


def nonce_new() -> bytes:
    return secrets.token_bytes(Poplar1.NONCE_SIZE)
