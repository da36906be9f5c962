"""Poplar1 (privacy.vdaf.poplar1): a client's sharding of a 64-bit string, and both aggregators' preparation at a level.

    .venv/bin/python bench/poplar1.py                               # writes bench/results/poplar1.md
    .venv/bin/python bench/poplar1.py --reports 20 --out /tmp/p.md  # a smoke run

Sharding: ``Poplar1.shard`` then the encodings, REPORTS random 64-bit strings one after the other on one
core (the IDPF's 64 levels of key generation, the correlated randomness). Preparation: for each
aggregation parameter below, both aggregators' ``verify_init`` (the IDPF evaluated at every candidate
prefix, the masked sketch), ``verifier_shares_to_message``, both ``verify_next``, the second message and
both ``verify_next`` again, on the decoded messages as an aggregator receives them; then ``aggregate``
and ``unshard``, checked against the measurements. Reports per second by the wall clock and by the
process's CPU time (which other work on the shared machine inflates less). Short: a run takes well
under two minutes.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from Crypto import __version__ as pycryptodome_version  # noqa: E402
from cryptography import __version__ as cryptography_version  # noqa: E402
from host import describe  # noqa: E402  (bench/host.py: this script's folder is on sys.path)

from privacy.vdaf.poplar1 import Poplar1  # noqa: E402

CTX = b"pfs studio bench"
BITS = 64
REPORTS = 200
# (level, number of candidate prefixes): a heavy-hitter walk's early, middle and last levels.
AGG_PARAMS = [(7, 16), (15, 100), (31, 100), (63, 100)]
Report = tuple[bytes, bytes, list[bytes]]  # nonce, encoded public share, encoded input shares


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(work):  # noqa: ANN001, ANN201 - a small local helper
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def shard_all(vdaf: Poplar1, measurements: list[tuple[bool, ...]], rng: random.Random) -> list[Report]:
    reports = []
    for measurement in measurements:
        nonce = rng.randbytes(vdaf.NONCE_SIZE)
        public_share, input_shares = vdaf.shard(CTX, measurement, nonce, rng.randbytes(vdaf.RAND_SIZE))
        reports.append(
            (nonce, vdaf.encode_public_share(public_share), [vdaf.encode_input_share(s) for s in input_shares])
        )
    return reports


def prepare_all(vdaf: Poplar1, verify_key: bytes, agg_param, reports: list[Report]) -> list[int]:  # noqa: ANN001
    """Both aggregators through both rounds for every report, then the two aggregate shares unsharded."""
    out_shares: list[list[list[int]]] = [[], []]
    for nonce, public_share, input_shares in reports:
        states, shares = [], []
        for agg_id in range(2):
            state, share = vdaf.verify_init(
                verify_key,
                CTX,
                agg_id,
                agg_param,
                nonce,
                vdaf.decode_public_share(public_share),
                vdaf.decode_input_share(agg_id, input_shares[agg_id]),
            )
            states.append(state)
            shares.append(share)
        message = vdaf.verifier_shares_to_message(CTX, agg_param, shares)
        round_two = [vdaf.verify_next(CTX, state, message) for state in states]
        message = vdaf.verifier_shares_to_message(CTX, agg_param, [share for _, share in round_two])
        for agg_id, (state, _) in enumerate(round_two):
            out_shares[agg_id].append(vdaf.verify_next(CTX, state, message))
    agg_shares = [vdaf.aggregate(agg_param, shares) for shares in out_shares]
    return vdaf.unshard(agg_param, agg_shares, len(reports))


def candidate_prefixes(measurements: list[tuple[bool, ...]], level: int, count: int, rng: random.Random) -> tuple:
    """The prefixes of the first measurements at this level, topped up with random ones: sorted, distinct."""
    prefixes = {m[: level + 1] for m in measurements[: count // 2]}
    while len(prefixes) < count:
        prefixes.add(tuple(rng.random() < 0.5 for _ in range(level + 1)))
    return tuple(sorted(prefixes))  # a tuple: the IDPF keeps its walk plan for the next report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", type=int, default=REPORTS)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "poplar1.md")
    args = parser.parse_args()
    rng = random.Random(20261126)
    vdaf = Poplar1(BITS)
    verify_key = rng.randbytes(vdaf.VERIFY_KEY_SIZE)
    # A few popular strings among random ones, so that candidate prefixes have counts to check.
    popular = [tuple(rng.random() < 0.5 for _ in range(BITS)) for _ in range(4)]
    measurements = [
        popular[i % 4] if i % 3 == 0 else tuple(rng.random() < 0.5 for _ in range(BITS)) for i in range(args.reports)
    ]
    load_before = load()

    reports, wall, cpu = timed(lambda: shard_all(vdaf, measurements, rng))
    sizes = (len(reports[0][1]), len(reports[0][2][0]))
    shard_row = (
        f"| shard (64-bit strings) | {args.reports:,} | {args.reports / wall:,.0f} | {args.reports / cpu:,.0f} | "
        f"{wall / args.reports * 1e3:.2f} | public share {sizes[0]:,} B, input share {sizes[1]:,} B each |"
    )
    print(shard_row, file=sys.stderr)
    rows = [shard_row]
    for level, count in AGG_PARAMS:
        prefixes = candidate_prefixes(measurements, level, count, rng)
        agg_param = (level, prefixes)
        assert vdaf.is_valid(agg_param, [])
        counts, wall, cpu = timed(lambda agg_param=agg_param: prepare_all(vdaf, verify_key, agg_param, reports))
        expected = [sum(m[: level + 1] == prefix for m in measurements) for prefix in prefixes]
        assert counts == expected, f"level {level}: the counts differ from the measurements'"
        field = vdaf.idpf.current_field(level).__name__
        rows.append(
            f"| prepare, both aggregators: level {level} ({field}), {count} prefixes | {args.reports:,} | "
            f"{args.reports / wall:,.0f} | {args.reports / cpu:,.0f} | {wall / args.reports * 1e3:.2f} | "
            f"counts checked: {sum(counts):,} reports under the prefixes |"
        )
        print(rows[-1], file=sys.stderr)
    load_after = load()

    lines = [
        "# Poplar1: a client's sharding and both aggregators' preparation",
        "",
        f"Machine: {describe(tasks='one process', database='no database')}; "
        f"`platform.processor()` gives {platform.processor()!r}; cryptography {cryptography_version} (AES-128), "
        f"pycryptodome {pycryptodome_version} (TurboSHAKE128). "
        f"Date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}. "
        f"Command: `.venv/bin/python bench/poplar1.py --reports {args.reports}`. "
        f"Load average before: {load_before}; after: {load_after}. **The two cores were shared with other "
        "work** (other engineers' tests and benches): the CPU column is the steadier one.",
        "",
        f"{args.reports:,} reports of {BITS}-bit strings, one process, one report at a time (the per-report path "
        "of `privacy.vdaf.poplar1`: the IDPF walked over all of a level's prefixes at once, one AES call per "
        "tree depth, Field64 values and the sketch as numpy uint64 arrays, the leaf level's Field255 as Python "
        "integers). Prepare: both aggregators' two rounds (verify_init, the two messages, verify_next twice) on "
        "the decoded messages, then aggregate and unshard, the counts checked against the measurements. The "
        "prefixes are one tuple per level, so the IDPF sorts them once for all reports.",
        "",
        "| step | reports | reports/s (wall) | reports/s (CPU) | ms/report (wall) | notes |",
        "|---|---:|---:|---:|---:|---|",
        *rows,
        "",
        "## Reading",
        "",
        "- **Sharding** is the IDPF's key generation: 64 levels, each one extend and one convert of both "
        "aggregators' seeds (an AES call each), the last level by TurboSHAKE128; its cost does not depend on the "
        "string. A device shards one report per collection.",
        "- **Preparation** walks each candidate prefix's path once per distinct node: its cost grows with the "
        "level (the depth walked) and with the number of distinct nodes on the way, one AES call per depth for "
        "all of them. The leaf level hashes with TurboSHAKE128 per node and computes in Field255.",
        "- The fixed AES keys depend on each report's nonce, so one AES call cannot span reports: with 100 "
        "prefixes the remaining per-report cost is the fixed Python and numpy overhead of each depth walked, "
        "not AES and not the prefixes (`bench/results/poplar1_recall.md` times tens of thousands of them).",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
