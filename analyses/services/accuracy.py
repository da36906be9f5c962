"""Accuracy first: a recipe's expected error per bucket, the "too noisy" refusal, and proposals from a target.

The numbers are privacy.accuracy's (the release's own estimators); this module applies them to an
analysis: its fleet, the reports a recipe expects (fleet x sampling rate), the go-ahead a start needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from analyses.models import Analysis
from analyses.rules.validation import Problems, sentence
from analyses.services.budget import budget_plan_refusal, budget_precheck, budget_request_for
from analyses.services.recipes import PRIVACY_CONTENT_KEYS, RECIPE_KEYS, recipe_validate
from pfs_base.errors import ValidationFailed
from pfs_device.decision import fields_of
from privacy.accuracy import LEVEL, ExpectedError, expected_error
from privacy.aggregator_noise import LAPLACE, aggregator_noise
from privacy.encoding import content_encoding
from privacy.enforced_cohort import min_cohort_enforced
from privacy.mechanisms import MECHANISMS, mechanism_get, replacement_epsilon0
from privacy.ngrams import SchemaError
from privacy.parameters import AGGREGATOR, CLIENT, PrivacyParameters

# The start's go-ahead for a spend the server expects to be wasted (analyses.services.cohorts):
# one confirmation, for batches below the minimum cohort and for noise above most buckets' counts.
CONFIRM_KEY = "confirmSmallCohorts"


def recipe_expected_error(analysis: Analysis, privacy: PrivacyParameters, buckets: int) -> ExpectedError:
    """The expected error per bucket of a recipe over ``buckets`` buckets, for the reports its
    sampling rate expects from the analysis's fleet (one release; a cohort split releases each
    batch over fewer reports, with the same noise and a smaller count a bucket)."""
    return expected_error(privacy, buckets=buckets, reports=analysis.fleet.size * privacy.sampling_rate)


def too_noisy_refusal(error: ExpectedError) -> str | None:
    """Why a start needs a go-ahead for its noise, in words; None when most buckets can hold it."""
    if not error.too_noisy:
        return None
    return (
        f"The expected noise exceeds what most buckets can hold: ±{_devices(error.half_width)} devices per bucket at "
        f"95% against about {_devices(error.per_bucket)} devices a bucket ({error.reports:,.0f} reports expected over "
        f"{error.buckets:,} buckets), so most counts would not be told from zero, though every device spends. "
        "Confirm to start anyway, or use fewer buckets, more devices (sampling rate) or a larger ε₀ or ε."
    )


def _devices(count: float) -> str:
    """A count of devices in words: whole from 10 up, two significant digits below (±0.84, not ±1)."""
    return f"{count:,.0f}" if count >= 10 else f"{count:.2g}"


# ---------------------------------------------------------------------- proposals from an accuracy target

# The values a proposal searches, within the policy (each filtered by its caps): "nice" figures an
# analyst would write, so that a proposal reads as a recipe and not as a solver's output.
EPSILONS: Final = (
    0.05,
    0.1,
    0.15,
    0.2,
    0.25,
    0.3,
    0.4,
    0.5,
    0.6,
    0.75,
    1.0,
    1.25,
    1.5,
    2.0,
    2.5,
    3.0,
    4.0,
    5.0,
    6.0,
    8.0,
    10.0,
)
EPSILON0S: Final = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 10.0)
SAMPLING_RATES: Final = (1.0, 0.5, 0.25, 0.1, 0.05, 0.02, 0.01)
TARGET_KEYS: Final = ("halfWidth", "relativeError")
ASSUMPTION: Final = (
    "A bucket holds reports / buckets devices (an even spread). The largest bucket holds at least that many, "
    "and its relative error is no larger (the noise grows more slowly than the count), so a relative error met "
    "there is met on the largest bucket; halfWidth is the error of such a typical bucket's count, in devices "
    "that report (fleet x sampling rate)."
)


@dataclass(frozen=True)
class Target:
    """What the analyst asks: +- half_width devices per bucket at 95%, or a relative error on the largest bucket."""

    half_width: float | None = None
    relative_error: float | None = None

    def met_by(self, error: ExpectedError) -> bool:
        return self.shortfall(error) <= 1.0

    def shortfall(self, error: ExpectedError) -> float:
        """The error over the target (at most 1: met); comparable across candidates."""
        if self.half_width is not None:
            return error.half_width / self.half_width
        return error.relative_error / self.relative_error

    def as_json(self) -> dict[str, float]:
        return {"halfWidth": self.half_width} if self.half_width is not None else {"relativeError": self.relative_error}

    def describe(self) -> str:
        if self.half_width is not None:
            return f"±{self.half_width:,.6g} devices per bucket at 95%"
        return f"a relative error of {self.relative_error:.4g} on the largest bucket at 95%"


def target_parse(data: Any) -> Target:
    """The target of a proposal, or ValidationFailed by key (``target.<key>``)."""
    if not isinstance(data, dict):
        raise ValidationFailed({"target": ['Must be an object: {"halfWidth": X} or {"relativeError": r}.']})
    problems = Problems()
    problems.only(data, TARGET_KEYS, "target.")
    given = [key for key in TARGET_KEYS if key in data]
    if len(given) != 1:
        problems.add("target", "Give exactly one of halfWidth (± devices per bucket) or relativeError (e.g. 0.1).")
    values = {key: problems.number(data, key, f"target.{key}", positive=True) for key in given}
    if problems:
        raise ValidationFailed(problems.errors)
    return Target(half_width=values.get("halfWidth"), relative_error=values.get("relativeError"))


@dataclass(frozen=True)
class _Base:
    """What a proposal keeps of the analyst's recipe: the field, its buckets, the kind of noise."""

    field: str
    buckets: int
    noise: str
    mechanism: str
    delta: float
    laplace: bool


@dataclass(frozen=True)
class Candidate:
    privacy: PrivacyParameters
    error: ExpectedError

    def recipe_privacy(self) -> dict[str, Any]:
        """The recipe's "privacy" object for these parameters (the minimum cohort is the devices' own)."""
        p = self.privacy
        if p.aggregator_noise:
            privacy: dict[str, Any] = {"noise": AGGREGATOR, "epsilon": p.epsilon}
            if p.delta == 0:
                privacy["noiseDistribution"] = LAPLACE
            else:
                privacy["delta"] = p.delta
        else:
            privacy = {"noise": CLIENT, "mechanism": p.mechanism, "epsilon0": p.epsilon0, "epsilon": p.epsilon}
            privacy["delta"] = p.delta
        privacy["samplingRate"] = p.sampling_rate
        return privacy

    def as_json(self) -> dict[str, Any]:
        return {
            "privacy": self.recipe_privacy(),
            "min_cohort": self.privacy.min_cohort,
            "buckets": self.error.buckets,
            "expected_error": self.error.as_json(),
        }

    def describe(self) -> str:
        p = self.privacy
        local = f"ε₀ = {p.epsilon0:g} ({p.mechanism}), " if not p.aggregator_noise else ""
        return (
            f"±{_devices(self.error.half_width)} devices per bucket (relative error {self.error.relative_error:.3g}) at "
            f"{local}ε = {p.epsilon:g}, δ = {p.delta:g}, sampling rate {p.sampling_rate:g}, {self.error.buckets:,} buckets"
        )


def recipe_propose(*, analysis: Analysis, content: Any, target: Any) -> dict[str, Any]:
    """The cheapest parameters (least ε spent) that meet ``target`` for the recipe ``content``, within the policy.

    Keeps the recipe's field, buckets, cohorts, kind of noise, mechanism and δ (the analysis's δ if it
    gives none); searches ε (EPSILONS, up to what the analysis's accountant still allows), ε₀ (EPSILON0S,
    up to the field's local cap) and the sampling rate (SAMPLING_RATES), under the minimum cohort devices
    enforce. Among the candidates of least ε: the largest sampling rate (the most devices), then the
    smallest ε₀ that meets it. The proposed recipe is checked by recipe_validate, the one judge.

    A candidate that would be too noisy (its half-width at least a bucket's count under an even spread)
    is never proposed: its start would ask for a go-ahead. When nothing within the policy meets the
    target, says so with the best error within it (at the largest ε allowed), and the most buckets
    (halving) at which the target would be met.
    """
    goal = target_parse(target)
    base = _base(analysis, content)
    search = _Search(analysis, base)
    epsilons = search.epsilons()
    if not epsilons:
        search.refuse_smallest()  # why not even the smallest ε fits, by key, as the recipe's own validation says
    best = search.best(epsilons[-1], goal, base.buckets)
    answer: dict[str, Any] = {"target": goal.as_json(), "assumption": ASSUMPTION, "level": LEVEL}
    if best is None or not goal.met_by(best.error):
        fewer = _fewer_buckets(search, epsilons[-1], goal, base.buckets)
        said = f"No parameters within the policy meet {goal.describe()}: "
        said += (
            f"the best is {best.describe()}."
            if best is not None
            else "every recipe within it is too noisy for this many buckets, or needs more devices than the fleet has."
        )
        if fewer is not None:
            said += f" With {fewer.error.buckets:,} buckets (merge boundaries) it is met: {fewer.describe()}."
        return {
            **answer,
            "met": False,
            "proposal": None,
            "best": best.as_json() if best is not None else None,
            "fewer_buckets": fewer.as_json() if fewer is not None else None,
            "message": said,
        }
    low, high = 0, len(epsilons) - 1  # meeting is monotone in ε for client noise; aggregator noise is scanned
    if base.noise == CLIENT:
        while low < high:
            middle = (low + high) // 2
            found = search.best(epsilons[middle], goal, base.buckets)
            low, high = (low, middle) if found is not None and goal.met_by(found.error) else (middle + 1, high)
        chosen = search.best(epsilons[low], goal, base.buckets)
    else:
        chosen = next(
            found
            for epsilon in epsilons
            if (found := search.best(epsilon, goal, base.buckets)) is not None and goal.met_by(found.error)
        )
    recipe = {key: value for key, value in content.items() if key != "recipeIdentifier"}
    recipe["privacy"] = chosen.recipe_privacy()
    recipe_validate(analysis=analysis, content=recipe)  # the one judge: a refusal is a 400 by key, as for any recipe
    return {
        **answer,
        "met": True,
        "proposal": chosen.as_json(),
        "recipe": recipe,
        "message": f"The cheapest parameters that meet {goal.describe()}: {chosen.describe()}.",
    }


def _base(analysis: Analysis, content: Any) -> _Base:
    if not isinstance(content, dict):
        raise ValidationFailed({"recipe": ["Must be a JSON object (the recipe to propose parameters for)."]})
    problems = Problems()
    # A typo must not change the question silently, here as in recipe_validate.
    problems.only(content, RECIPE_KEYS)
    problems.only(content.get("privacy"), PRIVACY_CONTENT_KEYS, "privacy.")
    data_types = problems.obj(content, "dataTypeContent", "dataTypeContent")
    privacy = content.get("privacy", {})
    if not isinstance(privacy, dict):
        problems.add("privacy", "Must be an object.")
        privacy = {}
    fields, encoding = None, None
    if data_types is not None:
        try:
            fields, encoding = content_encoding(data_types)
        except SchemaError as error:
            problems.add(f"dataTypeContent.{error.key}" if error.key else "dataTypeContent", sentence(error))
    noise = privacy.get("noise", CLIENT)
    if noise not in (CLIENT, AGGREGATOR):
        problems.add("privacy.noise", f"Must be one of {CLIENT}, {AGGREGATOR}.")
    mechanism = privacy.get("mechanism", "asymmetric_ohe") if noise == CLIENT else ""
    if noise == CLIENT and not (isinstance(mechanism, str) and mechanism in MECHANISMS):
        problems.add("privacy.mechanism", f"Unknown mechanism; known: {', '.join(sorted(MECHANISMS))}.")
    laplace = noise == AGGREGATOR and privacy.get("noiseDistribution") == LAPLACE
    delta = (
        0.0
        if laplace
        else problems.number(privacy, "delta", "privacy.delta", default=analysis.enforced.delta, open_unit=True)
    )
    if problems:
        raise ValidationFailed(problems.errors)
    return _Base(
        field=",".join(fields), buckets=encoding.size, noise=noise, mechanism=mechanism, delta=delta, laplace=laplace
    )


class _Search:
    """The candidates of one recipe within its analysis's policy; the devices' minimum cohorts memoized."""

    def __init__(self, analysis: Analysis, base: _Base) -> None:
        self.analysis = analysis
        self.base = base
        enforced = analysis.enforced
        self.floor = enforced.min_cohort_floor or 0
        self.aggregator_floor = enforced.aggregator_noise_min_cohort()
        caps = [enforced.field(name) for name in fields_of(base.field)]
        local_cap = min((cap.local_epsilon for cap in caps if cap is not None), default=0.0)
        self.epsilon0s = [e for e in EPSILON0S if self._replacement(e) <= local_cap] if base.noise == CLIENT else []
        self.cohorts: dict[tuple[float, float], int | None] = {}

    def _replacement(self, epsilon0: float) -> float:
        return replacement_epsilon0(mechanism_get(self.base.mechanism, epsilon0))

    def epsilons(self) -> list[float]:
        """The ε of the grid one more round may still spend, by the analysis's own accountant (monotone in ε)."""
        grid = [e for e in EPSILONS if e <= self.analysis.enforced.epsilon_allowed]
        low, high = 0, len(grid)  # grid[:low] fits, grid[high:] does not
        while low < high:
            middle = (low + high) // 2
            if self._fits(grid[middle]):
                low = middle + 1
            else:
                high = middle
        return grid[:low]

    def _fits(self, epsilon: float) -> bool:
        privacy = self._privacy(epsilon, self.epsilon0s[0] if self.epsilon0s else None, 1.0, 1)
        if privacy is None:
            return False
        return (
            budget_plan_refusal(
                self.analysis, self.base.field, [budget_request_for(privacy, self.base.field, self.base.buckets)]
            )
            is None
        )

    def refuse_smallest(self) -> None:
        """Raise ValidationFailed by key: why a round at the grid's smallest ε would be refused."""
        problems = Problems()
        # The smallest ε₀ of the grid, allowed or not: the devices' own checks then say what refuses.
        privacy = self._privacy(EPSILONS[0], EPSILON0S[0], 1.0, 1)
        budget_precheck(
            problems, self.analysis, self.base.field, budget_request_for(privacy, self.base.field, self.base.buckets)
        )
        if not problems:
            problems.add("privacy.epsilon", f"Even ε = {EPSILONS[0]:g} is more than the analysis's budget allows.")
        raise ValidationFailed(problems.errors)

    def _privacy(
        self, epsilon: float, epsilon0: float | None, rate: float, min_cohort: int
    ) -> PrivacyParameters | None:
        if self.base.noise == CLIENT:
            if epsilon0 is None:
                return None
            return PrivacyParameters(CLIENT, self.base.mechanism, epsilon0, epsilon, self.base.delta, rate, min_cohort)
        return PrivacyParameters(AGGREGATOR, "", None, epsilon, self.base.delta, rate, min_cohort)

    def min_cohort(self, epsilon0: float, epsilon: float) -> int | None:
        """The cohort devices enforce at (ε₀, ε) (the analysis's floor if larger); None if unreachable."""
        key = (epsilon0, epsilon)
        if key not in self.cohorts:
            try:
                # The recipe's domain, as check 3 has it (a suggestion of fewer buckets keeps this cohort:
                # never smaller than the one devices would enforce).
                needed = min_cohort_enforced(
                    mechanism=self.base.mechanism,
                    epsilon0=self._replacement(epsilon0),
                    epsilon=epsilon,
                    delta=self.base.delta,
                    domain_size=self.base.buckets,
                ).min_cohort
                self.cohorts[key] = max(needed, self.floor)
            except ValueError:
                self.cohorts[key] = None
        return self.cohorts[key]

    def best(self, epsilon: float, goal: Target, buckets: int) -> Candidate | None:
        """At ``epsilon``: the first candidate (largest sampling rate, then smallest ε₀) that meets ``goal``,
        else the one closest to it; None when no candidate reaches the fleet."""
        closest: Candidate | None = None
        for rate in SAMPLING_RATES:
            reports = self.analysis.fleet.size * rate
            for candidate in self._at(epsilon, rate, reports, goal, buckets):
                if goal.met_by(candidate.error):
                    return candidate
                if closest is None or goal.shortfall(candidate.error) < goal.shortfall(closest.error):
                    closest = candidate
        return closest

    def _at(self, epsilon: float, rate: float, reports: float, goal: Target, buckets: int) -> list[Candidate]:
        """The candidates at (ε, sampling rate) worth comparing: aggregator noise has one; client noise the
        smallest ε₀ that meets ``goal`` among those devices accept at this many reports, or their largest."""
        if self.base.noise == AGGREGATOR:
            if reports < self.aggregator_floor:
                return []
            privacy = self._privacy(epsilon, None, rate, self.aggregator_floor)
            try:
                aggregator_noise(privacy.epsilon, privacy.delta).check()
            except ValueError:
                return []  # below the smallest noise aggregators add
            candidate = Candidate(privacy, expected_error(privacy, buckets=buckets, reports=reports))
            return [] if candidate.error.too_noisy else [candidate]
        # The cohort grows with ε₀: the ε₀ devices accept at this many reports are a prefix of the grid.
        low, high = 0, len(self.epsilon0s)
        while low < high:
            middle = (low + high) // 2
            needed = self.min_cohort(self.epsilon0s[middle], epsilon)
            low, high = (middle + 1, high) if needed is not None and needed <= reports else (low, middle)
        accepted = self.epsilon0s[:low]
        if not accepted:
            return []
        candidates = []
        for epsilon0 in accepted:  # the error falls as ε₀ grows: the first that meets is the smallest
            privacy = self._privacy(epsilon, epsilon0, rate, self.min_cohort(epsilon0, epsilon))
            candidate = Candidate(privacy, expected_error(privacy, buckets=buckets, reports=reports))
            if candidate.error.too_noisy:
                continue  # never proposed: its start would ask for a go-ahead
            if goal.met_by(candidate.error):
                return [candidate]
            candidates.append(candidate)
        return candidates[-1:]


def _fewer_buckets(search: _Search, epsilon: float, goal: Target, buckets: int) -> Candidate | None:
    """The most buckets (the recipe's, halved until 2) at which ``goal`` is met at ``epsilon``; None if none."""
    fewer = buckets // 2
    while fewer >= 2:
        found = search.best(epsilon, goal, fewer)
        if found is not None and goal.met_by(found.error):
            return found
        fewer //= 2
    return None
