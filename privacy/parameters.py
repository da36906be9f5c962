"""A recipe's privacy parameters as one frozen value: what every layer reads, spelled out once.

The recipe (analyses), the task devices receive (pfs_device.decision.DeviceTask), the budget a device
is charged (pfs_device.decision.privacy_budget_request), the aggregators' batch rules and the release
all take their privacy numbers from a ``PrivacyParameters``, so none of them restates the list.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from privacy.aggregator_noise import GAUSSIAN, LAPLACE
from privacy.mechanisms import mechanism_get, replacement_epsilon0

Noise = Literal["client", "aggregator"]
CLIENT: Noise = "client"
AGGREGATOR: Noise = "aggregator"


@dataclass(frozen=True)
class PrivacyParameters:
    """noise: "client" (each device runs ``mechanism`` at ``epsilon0``) or "aggregator" (no local
    randomizer; each aggregator adds noise for (``epsilon``, ``delta``): the discrete Laplace when
    ``delta`` is 0, pure epsilon-DP, else the discrete Gaussian). ``epsilon``/``delta``: the aggregate
    guarantee; ``sampling_rate``: each device's participation probability;
    ``min_cohort``: the smallest batch either aggregator releases."""

    noise: Noise
    mechanism: str  # "" with aggregator noise
    epsilon0: float | None  # None with aggregator noise
    epsilon: float
    delta: float
    sampling_rate: float
    min_cohort: int

    @property
    def aggregator_noise(self) -> bool:
        return self.noise == AGGREGATOR

    @property
    def noise_distribution(self) -> str | None:
        """The aggregators' noise (privacy.aggregator_noise.aggregator_noise); None with client noise."""
        if not self.aggregator_noise:
            return None
        return LAPLACE if self.delta == 0 else GAUSSIAN

    @property
    def local_epsilon(self) -> float:
        """The local randomizer's epsilon in the replacement model, the unit of every cap and bound:
        a deletion-model randomizer costs twice its nominal epsilon0; with aggregator noise there is
        no local randomizer, so it is infinite."""
        if self.aggregator_noise:
            return math.inf
        return replacement_epsilon0(mechanism_get(self.mechanism, self.epsilon0))

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PrivacyParameters:
        """The parameters as ``as_json`` wrote them (a recipe's column, a task's keys); other keys are not read."""
        return cls(**{name: data[name] for name in PRIVACY_KEYS})


# The parameters' names, in the order every table, form and export lists them.
PRIVACY_KEYS: tuple[str, ...] = tuple(f.name for f in fields(PrivacyParameters))
