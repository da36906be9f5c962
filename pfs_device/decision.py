"""What a device decides about a task, before it reads any data; pure (numpy, no Django).

The one implementation of the device's decision, vectorised over devices: a simulated shard
(devices.services) calls it for thousands at once, a real device (pfs_device.sdk) for itself alone.
In order: sampled?; the snapshot it holds?; the query in the approved class?; checks 1-3 of the
budget accountant (pfs_device.budget). Also here: the task as devices receive it, the snapshot
digest, and each device's batch key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from functools import cached_property

import numpy as np
import numpy.typing as npt

from pfs_device.budget import Accountant, BudgetRequest, Decision
from pfs_device.columns import Columns
from pfs_device.encode import ParsedContent, content_fits
from pfs_device.query import QueryRefused, verify_query
from privacy.encoding import content_encoding
from privacy.heavy_hitters import walk_levels
from privacy.parameters import CLIENT, PRIVACY_KEYS, PrivacyParameters


def snapshot_digest(content: dict) -> str:
    """The name of a policy snapshot: SHA-256 of its canonical JSON."""
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def fields_of(encoded_field: str) -> tuple[str, ...]:
    """The fields a task encodes: one, or several joined by a CombinationType ("age,ngrams")."""
    return tuple(encoded_field.split(","))


@dataclass(frozen=True)
class DeviceTask:
    """What the server sends the devices for one round: the recipe as the device sees it."""

    task_key: str  # the collection id the aggregators file the shares under
    analysis: str
    snapshot_digest: str
    query: str
    cohorts: tuple[str, ...]
    encoded_field: str  # the encoded field, or the joined fields "age,ngrams" of a CombinationType
    data_types: dict  # the recipe's dataTypeContent, as Figure 4 sends it
    privacy: PrivacyParameters
    seed: int  # seeds a simulated shard's coins; real devices use their own OS randomness
    # Real devices: the SHA-256 of the issuer key of this collection (pfs_device.tokens). Every
    # device is sent the same task, so a key served to one device alone is refused by it.
    token_key: str = ""
    # content_encoding(data_types) when the sender parsed it already (the server: its recipe's,
    # parsed once per recipe); never sent, and not part of what the task is.
    parsed: ParsedContent | None = field(default=None, compare=False, repr=False)

    @property
    def fields(self) -> tuple[str, ...]:
        return fields_of(self.encoded_field)

    @cached_property
    def parsed_content(self) -> ParsedContent | None:
        """content_encoding(data_types), parsed at most once per task object (a shard reads it three
        times, and a recipe's 1,023 boundaries take a third of a millisecond to parse); None: unparseable."""
        if self.parsed is not None:
            return self.parsed
        try:
            return content_encoding(self.data_types)
        except ValueError:
            return None

    def as_json(self) -> dict:
        """The task as devices receive it. The privacy parameters are flat keys beside the others, as
        devices have always read them (docs/devices-sdk.md), and as ShardRun's audit keeps them."""
        # Not dataclasses.asdict: its element-by-element deep copy costs 5 ms per shard for a recipe
        # of 1,023 boundaries. The only mutable field is data_types, plain JSON: new dicts and lists
        # around the same immutable numbers and strings are a deep copy (0.05 ms).
        data = {f.name: getattr(self, f.name) for f in dataclass_fields(self) if f.name not in _NOT_FLAT}
        data["data_types"] = _json_copy(self.data_types)
        return {**data, **self.privacy.as_json()}

    def audit_json(self) -> dict:
        """What a device logs of the task, and what a real device is sent: everything but the seed."""
        return {k: v for k, v in self.as_json().items() if k != "seed"}

    @classmethod
    def from_json(cls, data: dict) -> DeviceTask:
        """The task ``as_json`` wrote (a task from before aggregator noise has no "noise": client noise).
        Any other key is refused (TypeError), "parsed" too: a device parses the schema itself."""
        if "parsed" in data:
            raise TypeError("a task's JSON has no key 'parsed'")
        data = {"noise": CLIENT, **data}
        privacy = PrivacyParameters.from_json(data)
        rest = {k: v for k, v in data.items() if k not in PRIVACY_KEYS}
        return cls(privacy=privacy, **{**rest, "cohorts": tuple(data["cohorts"])})  # a "privacy" key: TypeError

    @classmethod
    def from_wire(cls, data: dict) -> DeviceTask:
        """The task a real device received (audit_json): it has no seed, the device has its own coins."""
        return cls.from_json({**data, "seed": 0})


# Fields as_json does not write as they are: the parameters are spread flat, the parse is not sent.
_NOT_FLAT = frozenset({"privacy", "parsed"})


def _json_copy(value: object) -> object:
    """A deep copy of a JSON value: containers rebuilt, numbers, strings and None shared (immutable)."""
    if isinstance(value, dict):
        return {key: _json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_copy(item) if isinstance(item, (dict, list)) else item for item in value]
    return value


def budget_request(task: DeviceTask) -> BudgetRequest:
    """What answering ``task`` charges one device."""
    # The domain the device parsed itself, never a size a task could claim.
    parsed = task.parsed_content
    if parsed is None:
        return privacy_budget_request(task.privacy, task.fields, None)
    return privacy_budget_request(task.privacy, task.fields, parsed[1].size, walk_levels(parsed[1]))


def privacy_budget_request(
    privacy: PrivacyParameters, fields: tuple[str, ...], domain_size: int | None = None, levels: int = 0
) -> BudgetRequest:
    """What answering a task with these parameters over ``fields`` charges one device.

    The one budget mapping: devices charge it, and the server's pre-check runs it on its own view.
    Cohort fields are approved as non-sensitive (Appendix B of seed 000): they route the report to
    a batch but are not charged to a field budget. The device converts the mechanism's epsilon0 to
    the replacement model itself (PrivacyParameters.local_epsilon): a deletion-model randomizer
    costs twice its nominal epsilon0 against the caps and in Theorem 3.1. With aggregator noise
    there is no local randomizer: its local epsilon is infinite. ``levels``: a Poplar1 walk's
    (privacy.heavy_hitters.walk_levels), whose levels compose within (epsilon, delta).
    """
    return BudgetRequest(
        epsilon0=privacy.local_epsilon,
        epsilon=privacy.epsilon,
        delta=privacy.delta,
        fields=fields,
        min_cohort=privacy.min_cohort,
        aggregator_noise=privacy.aggregator_noise,
        mechanism=privacy.mechanism,
        mechanism_epsilon0=privacy.epsilon0,
        domain_size=domain_size,
        walk_levels=levels,
    )


def task_verified(policy: dict, fleet_name: str, task: DeviceTask) -> bool:
    """The task is for this analysis and fleet, its query in the approved class, its schema fits the data."""
    if policy["analysis"] != task.analysis or policy["fleet"] != fleet_name:
        return False
    try:
        query = verify_query(task.query, task.cohorts, policy["queryClass"])
    except QueryRefused:
        return False
    return set(query.fields) == set(task.fields) and content_fits(query.stream, task.data_types, task.parsed_content)


def decide(
    *, task: DeviceTask, policy: dict | None, fleet_name: str, ledger: Columns, sampled: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.int8], Accountant | None]:
    """Per device: Decision.ANSWERED or why not; and the policy's accountant, if it got that far.

    ``policy`` is the snapshot the devices hold for the task's analysis, or None when they hold
    none with the task's digest. ``sampled`` is each device's own participation draw. Reads
    neither the devices' data nor writes their ledger.
    """
    decision = np.full(sampled.size, Decision.ANSWERED, dtype=np.int8)
    decision[~sampled] = Decision.NOT_SAMPLED
    if policy is None:
        decision[sampled] = Decision.POLICY_SNAPSHOT
        return decision, None
    if not task_verified(policy, fleet_name, task):
        decision[sampled] = Decision.QUERY_CLASS
        return decision, None
    accountant = Accountant.for_policy(policy)
    checks = accountant.check(ledger, policy, budget_request(task))
    decision[sampled] = checks[sampled]
    return decision, accountant


def cohort_keys(cohorts: tuple[str, ...], columns: Columns, vocabularies: dict) -> npt.NDArray[np.object_]:
    """Each device's batch key, e.g. 'locale=en_US'; '' for every device when there are no cohorts."""
    size = columns["phrase_start"].size - 1
    keys = np.full(size, "", dtype=object)
    for cohort in cohorts:
        vocabulary = np.asarray(vocabularies[cohort], dtype=object)
        part = np.char.add(f"{cohort}=", vocabulary[columns[cohort]].astype(str)).astype(object)
        keys = np.where(keys == "", part, keys + "&" + part)
    return keys
