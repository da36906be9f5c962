"""Prio3 verification of uploaded reports: the leader's side, the helper's side, and what they exchange.

Each aggregator holds only its own input shares and its own state (``AggregatorVerification``), in
its own process; what crosses between them is what draft-irtf-cfrg-vdaf-20 Section 7.2 exchanges,
encoded, in DAP's ping-pong order for a one-round VDAF (aggregation.dap, aggregation.reports):

1. the leader runs verify_init on its input shares (``start``): its verifier shares, kept state;
   they travel to the helper in the aggregation job;
2. the helper runs verify_init on its own, combines both verifier shares and decides each proof
   (``proofs_decide``: the verifier message, or None for a report
   refused), runs verify_next (``finish``), commits its output shares and answers with the messages;
3. the leader runs verify_next on its own state with the messages and keeps its output shares.

A report counts only if both accept it. Everything is done for a whole job of reports at once
(privacy.vdaf.batch, its FLP query compiled by aggregation.flp_query_jit), and agrees byte for byte with the per-report reference path of
privacy.vdaf.prio3.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from privacy.report_vdaf import ReportShape, context
from privacy.vdaf import Prio3, batch
from privacy.vdaf.field import Field128

AGG_IDS = {"leader": 0, "helper": 1}


@functools.cache
def compiled_query() -> batch.FlpQuery:
    """The compiled FLP query, imported on a process's first verification: numba and its compiled
    code take about 200 MiB, which the processes that never verify (the dashboard's, most tasks')
    should not hold."""
    from aggregation.flp_query_jit import flp_query

    return flp_query


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
            config.vdaf,
            config.verify_key,
            config.ctx,
            AGG_IDS[self.role],
            nonces,
            public_shares,
            input_shares,
            query=compiled_query(),
        )
        return verifier_shares

    def finish(self, messages: Sequence[bytes | None]) -> list[bool]:
        """verify_next on the verifier messages: which reports this aggregator accepts."""
        assert self.state is not None, "start first"
        self.accepted = batch.verify_next_batch(self.config.vdaf, self.config.ctx, self.state, messages)
        return self.accepted

    def output_share(self, report: int) -> bytes:
        """The encoded output share of an accepted report (this aggregator's share of its vector)."""
        assert self.state is not None and self.accepted[report]
        share = self.state.out_shares[report]
        assert share is not None
        return share


def proofs_decide(
    config: VerifyConfig, leader_shares: Sequence[bytes | None], helper_shares: Sequence[bytes | None]
) -> list[bytes | None]:
    """Decide each proof from both verifier shares (the helper's step in DAP's ping-pong): the verifier
    messages, None for a report refused."""
    return batch.verifier_shares_to_message_batch(config.vdaf, config.ctx, [leader_shares, helper_shares])


def output_sum(config: VerifyConfig, shares: Sequence[bytes]) -> bytes:
    """The encoded sum of encoded output shares (one aggregator's, of some accepted reports)."""
    vdaf = config.vdaf
    state = batch.BatchVerifyState(0, list(shares), [None] * len(shares))
    return vdaf.field.encode_vec(batch.aggregate_batch(vdaf, state, [True] * len(shares)))
