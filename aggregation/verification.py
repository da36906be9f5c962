"""Prio3 verification of uploaded reports: the leader's side, the helper's side, and what they exchange.

Each aggregator holds only its own input shares and its own state (``AggregatorVerification``); what
crosses between them is what draft-irtf-cfrg-vdaf-20 Section 7.2 exchanges, encoded:

1. each runs verify_init on its input shares (``start``): its verifier shares, kept state;
2. the helper sends its verifier shares to the leader, which combines them with its own and decides
   each proof (``leader_combine``: the verifier message, or None for a report refused);
3. the leader sends the messages to the helper; each runs verify_next on its own state (``finish``)
   and keeps the output shares of the reports it accepts.

A report counts only if both accept it. Everything is done for a whole chunk of reports at once
(privacy.vdaf.batch: the FLP query vectorised with numpy), and agrees byte for byte with the
per-report reference path of privacy.vdaf.prio3. Both sides run in this process in this deployment,
but neither reads the other's state: the leader sees the helper's verifier shares, the helper the
leader's messages, as over the network between two servers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from privacy.report_vdaf import ReportShape, context
from privacy.vdaf import Prio3, batch
from privacy.vdaf.field import Field128

AGG_IDS = {"leader": 0, "helper": 1}


@dataclass(frozen=True)
class VerifyConfig:
    """What both aggregators are configured with for a collection: its VDAF, context and verification key."""

    vdaf: Prio3
    ctx: bytes
    verify_key: bytes

    @classmethod
    def of(cls, *, collection_key: str, shape: ReportShape, verify_key: bytes) -> VerifyConfig:
        return cls(vdaf=shape.vdaf(), ctx=context(collection_key), verify_key=verify_key)

    @property
    def field_name(self) -> str:
        return "field128" if self.vdaf.field is Field128 else "field64"


@dataclass
class AggregatorVerification:
    """One aggregator's verification of a chunk of reports: its own state, nothing of the other's."""

    role: str
    config: VerifyConfig
    state: batch.BatchVerifyState | None = None
    accepted: list[bool] = field(default_factory=list)

    def start(
        self, nonces: Sequence[bytes], public_shares: Sequence[bytes], input_shares: Sequence[bytes]
    ) -> list[bytes | None]:
        """verify_init on this aggregator's input shares: its encoded verifier shares (None: refused here).

        ``nonces``: the VDAF nonces (16 bytes; an uploaded report's is report_nonce of its token's).
        """
        config = self.config
        self.state, verifier_shares = batch.verify_init_batch(
            config.vdaf, config.verify_key, config.ctx, AGG_IDS[self.role], nonces, public_shares, input_shares
        )
        return verifier_shares

    def finish(self, messages: Sequence[bytes | None]) -> list[bool]:
        """verify_next on the leader's messages: which reports this aggregator accepts."""
        assert self.state is not None, "start first"
        self.accepted = batch.verify_next_batch(self.config.vdaf, self.config.ctx, self.state, messages)
        return self.accepted

    def output_share(self, report: int) -> bytes:
        """The encoded output share of an accepted report (this aggregator's share of its vector)."""
        assert self.state is not None and self.accepted[report]
        share = self.state.out_shares[report]
        assert share is not None
        return share


def leader_combine(
    config: VerifyConfig, leader_shares: Sequence[bytes | None], helper_shares: Sequence[bytes | None]
) -> list[bytes | None]:
    """The leader's step: decide each proof from both verifier shares; the messages it sends the helper."""
    return batch.verifier_shares_to_message_batch(config.vdaf, config.ctx, [leader_shares, helper_shares])


def verify_reports(
    config: VerifyConfig,
    nonces: Sequence[bytes],
    public_shares: Sequence[bytes],
    input_shares: dict[str, Sequence[bytes]],
    *,
    helper_config: VerifyConfig | None = None,
) -> dict[str, AggregatorVerification]:
    """One round of verification of reports both aggregators hold a share of: each side, finished.

    ``input_shares[role]``: that aggregator's input shares, one per report. The helper's verifier
    shares go to the leader, the leader's messages come back; each side's ``accepted`` says which
    reports it accepts (a report counts only if both do). ``config`` is the leader's configuration,
    ``helper_config`` the helper's own (from its copy of the rules; the leader's when None).
    """
    configs = {"leader": config, "helper": helper_config or config}
    sides = {role: AggregatorVerification(role, configs[role]) for role in AGG_IDS}
    verifier_shares = {role: side.start(nonces, public_shares, input_shares[role]) for role, side in sides.items()}
    messages = leader_combine(config, verifier_shares["leader"], verifier_shares["helper"])
    for side in sides.values():
        side.finish(messages)
    return sides


def output_sum(config: VerifyConfig, shares: Sequence[bytes]) -> bytes:
    """The encoded sum of encoded output shares (one aggregator's, of some accepted reports)."""
    vdaf = config.vdaf
    state = batch.BatchVerifyState(0, list(shares), [None] * len(shares))
    return vdaf.field.encode_vec(batch.aggregate_batch(vdaf, state, [True] * len(shares)))
