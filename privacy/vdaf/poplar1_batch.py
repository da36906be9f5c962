"""Poplar1's verify_init for many reports at one aggregation parameter (``Poplar1.verify_init_batch``).

An aggregator prepares every report of a collection at the same level and prefixes. Report by
report, the fixed cost of each numpy step of the IDPF walk and of the sketch is paid once per report;
here it is paid once per batch: the walk is ``privacy.vdaf.idpf_batch`` and the sketch sums are 2-D
arrays, one row per report. What stays per report is what depends on a report's own keys: its XOF
streams (correlated randomness, the verification randomness) and its AES calls. The result is, report
for report, what ``Poplar1.verify_init`` returns: the same checks first, the same values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from privacy.vdaf import field64_arrays, idpf_batch
from privacy.vdaf.errors import VdafError, verify_init_checked
from privacy.vdaf.field import Field
from privacy.vdaf.idpf import PublicShare
from privacy.vdaf.idpf_batch import decode_draws, eval_batch
from privacy.vdaf.poplar1 import (
    STEP_EVALUATE,
    USAGE_CORR_INNER,
    USAGE_VERIFY_RAND,
    AggParam,
    InputShare,
    Poplar1,
    VerifierShare,
    VerifyState,
    _next_array64,
)
from privacy.vdaf.xof import XofTurboShake128


def verify_init_batch(
    vdaf: Poplar1,
    verify_key: bytes,
    ctx: bytes,
    agg_id: int,
    agg_param: AggParam,
    nonces: Sequence[bytes],
    public_shares: Sequence[PublicShare],
    input_shares: Sequence[InputShare],
) -> list[tuple[VerifyState, VerifierShare]]:
    """``vdaf.verify_init`` of each report (nonces[i], public_shares[i], input_shares[i]), in order."""
    if not len(nonces) == len(public_shares) == len(input_shares):
        raise VdafError("one nonce, public share and input share per report")
    for nonce in nonces:
        verify_init_checked(vdaf, verify_key, nonce, agg_id)
    # A chunk of reports at a time, all the way to the sketch: its arrays then stay in the core's cache.
    step = max(1, idpf_batch.ROWS_PER_CHUNK // max(1, len(agg_param[1])))
    results = []
    for i in range(0, len(nonces), step):
        chunk = slice(i, i + step)
        results += _verify_chunk(
            vdaf, verify_key, ctx, agg_id, agg_param, nonces[chunk], public_shares[chunk], input_shares[chunk]
        )
    return results


def _verify_chunk(vdaf, verify_key, ctx, agg_id, agg_param, nonces, public_shares, input_shares) -> list:  # noqa: ANN001
    """verify_init_batch of a few reports, after its checks."""
    level, prefixes = agg_param
    field = vdaf.idpf.current_field(level)
    p = field.MODULUS
    values = eval_batch(
        vdaf.idpf, agg_id, public_shares, [share[0] for share in input_shares], level, prefixes, ctx, nonces
    )
    inner = level < vdaf.BITS - 1
    offsets, corrections = [], []
    corr_dst = vdaf.domain_separation_tag(USAGE_CORR_INNER, ctx)
    for nonce, (_, corr_seed, corr_inner, corr_leaf) in zip(nonces, input_shares, strict=True):
        # Each report's own XOF streams: nothing to share across reports.
        if inner:
            # The stream read up to this level as one array (the spec's fast-forward), not element by element.
            xof = vdaf.xof(corr_seed, corr_dst, bytes([agg_id]) + nonce)
            a, b, c = _next_array64(xof, 3 * (level + 1))[3 * level :].tolist()
            big_a, big_b = corr_inner[2 * level : 2 * level + 2]
        else:
            a, b, c = vdaf._corr_leaf(ctx, agg_id, corr_seed, nonce)
            big_a, big_b = corr_leaf
        offsets.append((a, b, c))
        corrections.append((big_a, big_b))
    dst = vdaf.domain_separation_tag(USAGE_VERIFY_RAND, ctx)
    binder = level.to_bytes(2, "big")
    rand_xofs = [vdaf.xof(verify_key, dst, nonce + binder) for nonce in nonces]
    data, auth = values[:, :, 0], values[:, :, 1]
    if values.dtype == np.uint64:
        r = np.array([_next_array64(xof, len(prefixes)) for xof in rand_xofs], dtype=np.uint64)
        r = r.reshape(len(nonces), len(prefixes))
        abc = np.array(offsets, dtype=np.uint64).reshape(len(nonces), 3)
        # z = sum d r, z* = sum d r**2, z** = sum e r (and sum e r**2, unused: one matrix product is cheaper than two).
        sums = field64_arrays.row_dots([data, auth], [r, field64_arrays.mul(r, r)])
        sketches = field64_arrays.add(abc, np.stack([sums[:, 0, 0], sums[:, 0, 1], sums[:, 1, 0]], axis=1)).tolist()
    else:
        r = _next_arrays(rand_xofs, field, len(prefixes))
        abc = np.empty((len(nonces), 3), dtype=object)
        if offsets:
            abc[:] = offsets
        data_r = data * r
        # Python integers: the products are summed exactly and reduced once per report.
        sketches = np.stack(
            [abc[:, 0] + data_r.sum(axis=1), abc[:, 1] + (data_r * r).sum(axis=1), abc[:, 2] + (auth * r).sum(axis=1)],
            axis=1,
        )
        sketches = (sketches % p).tolist()
    return [
        ((STEP_EVALUATE, level, [big_a, big_b, agg_id, *out_share]), sketch)
        for (big_a, big_b), out_share, sketch in zip(corrections, data.tolist(), sketches, strict=True)
    ]


def _next_arrays(xofs: Sequence[XofTurboShake128], field: type[Field], length: int) -> npt.NDArray[np.object_]:
    """``xof.next_vec(field, length)`` of each XOF, one row each: every stream read in one piece and
    decoded for all of them at once; a row with a rejected draw reads on from where its piece ended."""
    size = field.ENCODED_SIZE
    raw = np.frombuffer(b"".join(xof.next(size * length) for xof in xofs), dtype=np.uint8)
    draws, rejected = decode_draws(raw.reshape(len(xofs), length, size), field)
    for i in np.flatnonzero(rejected.any(axis=1)).tolist():
        kept = draws[i][~rejected[i]].tolist()
        draws[i] = kept + xofs[i].next_vec(field, length - len(kept))
    return draws
