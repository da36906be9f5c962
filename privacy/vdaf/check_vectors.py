"""Replay draft-irtf-cfrg-vdaf-20's test vectors (Appendix C, "Test Vectors") against this package.

    python -m privacy.vdaf.check_vectors FILE.json...
    python -m privacy.vdaf.check_vectors tests/vectors/vdaf/*.json tests/vectors/vdaf/vdaf/*.json

The second line checks the repository's own copy of the draft's vectors (tests/vectors/vdaf/README.md says where
they come from).

A ``vdaf/Prio3*.json`` or ``vdaf/Poplar1_*.json`` file is replayed operation by operation, each step taking
its inputs from the file (as the schema says) and its output compared byte for byte with the file's; an
operation marked ``"success": false`` must be refused. Poplar1's messages are decoded under the file's
aggregation parameter, and its two rounds of verification compare the verifier shares of each.
``XofTurboShake128.json`` and ``XofFixedKeyAes128.json`` check that XOF's derived seed and expanded
Field128 vector; ``IdpfBBCGGI21_0.json`` checks the IDPF's key generation (public share and keys) and then
evaluates the file's own keys at every level, on alpha's path (beta) and beside it (zero). Which VDAF,
XOF or IDPF a file holds is read from its name (``Prio3Count_0``, ``Poplar1_2``).

Exit status: 0 if every file matches, 1 if any value or success flag differs (each printed with its
file, operation and step), 2 for bad usage (no file, a file that cannot be read or parsed, or a name
that names no known VDAF, XOF or IDPF).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from privacy.vdaf.errors import VdafError
from privacy.vdaf.field import Field128
from privacy.vdaf.idpf import IdpfBBCGGI21
from privacy.vdaf.poplar1 import Poplar1
from privacy.vdaf.poplar1 import VerifyState as Poplar1VerifyState
from privacy.vdaf.prio3 import (
    Prio3,
    Prio3Count,
    Prio3Histogram,
    Prio3MultihotCountVec,
    Prio3Sum,
    Prio3SumVec,
    VerifyState,
)
from privacy.vdaf.xof import XofFixedKeyAes128, XofTurboShake128

SHOWN_HEX = 96  # characters of a differing value printed before it is cut
# Parameters each variant's vectors list besides "shares" (the schema's subsections).
_PARAMETERS = {
    "Prio3Sum": ("max_measurement",),
    "Prio3SumVec": ("length", "max_measurement", "chunk_length"),
    "Prio3Histogram": ("length", "chunk_length"),
    "Prio3MultihotCountVec": ("length", "max_weight", "chunk_length"),
    "Poplar1": ("bits",),
}


# The XOF files check one XOF alone; which one is read from the file name, as for the VDAFs.
_XOFS: dict[str, type[XofTurboShake128] | type[XofFixedKeyAes128]] = {
    "XofTurboShake128": XofTurboShake128,
    "XofFixedKeyAes128": XofFixedKeyAes128,
}


# What the summary line says a file without operations was checked for.
_ALONE = {"IdpfBBCGGI21": "IDPF key generation and evaluation"} | {name: "XOF checks" for name in _XOFS}


class UsageError(Exception):
    """The file cannot be checked at all (exit status 2)."""


class Mismatch(Exception):
    """An operation's output or success flag differs from the file's."""


def vdaf_for(name: str, params: dict[str, Any]) -> Prio3 | Poplar1:
    """The VDAF a vector file names (a Prio3 variant or Poplar1), built from the parameters it lists."""
    kind = name.split("_", 1)[0]
    if kind not in ("Prio3Count", "Prio3Sum", "Prio3SumVec", "Prio3Histogram", "Prio3MultihotCountVec", "Poplar1"):
        raise UsageError(f"cannot tell the VDAF from the file name {name!r}")
    missing = [key for key in ("shares", *_PARAMETERS.get(kind, ())) if key not in params]
    if missing:
        raise UsageError(f"{name}: the parameters {', '.join(missing)} are missing")
    shares = params["shares"]
    if kind == "Poplar1":
        if shares != Poplar1.SHARES:
            raise UsageError(f"{name}: Poplar1 has {Poplar1.SHARES} shares, the file says {shares}")
        return Poplar1(params["bits"])
    if kind == "Prio3Count":
        vdaf: Prio3 = Prio3Count(shares=shares)
    elif kind == "Prio3Sum":
        vdaf = Prio3Sum(params["max_measurement"], shares=shares)
    elif kind == "Prio3SumVec":
        vdaf = Prio3SumVec(params["length"], params["max_measurement"], params["chunk_length"], shares=shares)
    elif kind == "Prio3Histogram":
        vdaf = Prio3Histogram(params["length"], params["chunk_length"], shares=shares)
    else:
        vdaf = Prio3MultihotCountVec(params["length"], params["max_weight"], params["chunk_length"], shares=shares)
    # The draft's vectors use one proof unless a file says otherwise.
    proofs = params.get("proofs", 1)
    if proofs != 1:
        vdaf = Prio3(vdaf.flp.valid, algorithm_id=vdaf.ID, shares=shares, proofs=proofs)
    return vdaf


def _shorten(value: str) -> str:
    return value if len(value) <= SHOWN_HEX else f"{value[:SHOWN_HEX]}... ({len(value) // 2} bytes)"


def _first_difference(expected: str, got: str) -> int:
    """The first byte at which two hex strings differ (the shorter one's length if one extends the other)."""
    first = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), None)
    return (first if first is not None else min(len(expected), len(got))) // 2


def _compare(what: str, expected: Any, got: Any, where: Callable[[int], str] | None = None) -> None:
    """Mismatch unless equal; for hex strings, the first differing byte, and ``where(byte)`` names its field."""
    if expected != got:
        detail = ""
        if isinstance(expected, str) and isinstance(got, str):
            byte = _first_difference(expected, got)
            detail = f" (first difference at byte {byte}{f', in {where(byte)}' if where else ''})"
            expected, got = _shorten(expected), _shorten(got)
        raise Mismatch(f"{what} differs{detail}\n    expected {expected}\n    got      {got}")


def public_share_field(idpf: IdpfBBCGGI21, byte: int) -> str:
    """Which part of an encoded IDPF public share holds ``byte`` (Section 8.2.6.1's layout)."""
    packed_len = (2 * idpf.BITS + 7) // 8
    seeds_end = packed_len + idpf.KEY_SIZE * idpf.BITS
    inner_size = idpf.field_inner.ENCODED_SIZE * idpf.VALUE_LEN
    inner_end = seeds_end + inner_size * (idpf.BITS - 1)
    if byte < packed_len:
        return f"the packed control bit corrections (levels {4 * byte} to {4 * byte + 3})"
    if byte < seeds_end:
        return f"the seed correction word of level {(byte - packed_len) // idpf.KEY_SIZE}"
    if byte < inner_end:
        return f"the value correction word of level {(byte - seeds_end) // inner_size}"
    return f"the value correction word of level {idpf.BITS - 1} (the leaves)"


def xof_for(name: str) -> type[XofTurboShake128] | type[XofFixedKeyAes128]:
    """The XOF an XOF vector file names (``XofFixedKeyAes128.json``)."""
    xof = _XOFS.get(name)
    if xof is None:
        raise UsageError(f"cannot tell the XOF from the file name {name!r}")
    return xof


def check_xof(xof: type[XofTurboShake128] | type[XofFixedKeyAes128], data: dict[str, Any]) -> None:
    seed, dst, binder = (bytes.fromhex(data[k]) for k in ("seed", "dst", "binder"))
    _compare("derived_seed", data["derived_seed"], xof.derive_seed(seed, dst, binder).hex())
    vec = xof.expand_into_vec(Field128, seed, dst, binder, data["length"])
    _compare("expanded_vec_field128", data["expanded_vec_field128"], Field128.encode_vec(vec).hex())


def check_idpf(data: dict[str, Any]) -> None:
    """Key generation from the file's keys (its ``rand``) gives its public share; then the file's own public
    share and keys, evaluated at every level, sum to beta on alpha's path and to zero on the sibling off it."""
    alpha = tuple(bool(bit) for bit in data["alpha"])
    beta_inner = [[int(x) for x in beta] for beta in data["beta_inner"]]
    beta_leaf = [int(x) for x in data["beta_leaf"]]
    idpf = IdpfBBCGGI21(data["bits"], len(beta_leaf))
    ctx, nonce = bytes.fromhex(data["ctx"]), bytes.fromhex(data["nonce"])
    public_share, keys = idpf.gen(alpha, beta_inner, beta_leaf, ctx, nonce, bytes.fromhex("".join(data["keys"])))
    _compare(
        "public_share",
        data["public_share"],
        idpf.encode_public_share(public_share).hex(),
        lambda byte: public_share_field(idpf, byte),
    )
    for j, (expected, key) in enumerate(zip(data["keys"], keys, strict=True)):
        _compare(f"keys[{j}]", expected, key.hex())
    published = idpf.decode_public_share(bytes.fromhex(data["public_share"]))
    published_keys = [bytes.fromhex(key) for key in data["keys"]]
    for level in range(idpf.BITS):
        field = idpf.current_field(level)
        on_path, sibling = alpha[: level + 1], (*alpha[:level], not alpha[level])
        shares = [
            idpf.eval(agg_id, published, published_keys[agg_id], level, [on_path, sibling], ctx, nonce)
            for agg_id in range(idpf.SHARES)
        ]
        values = [[(x + y) % field.MODULUS for x, y in zip(*pair, strict=True)] for pair in zip(*shares, strict=True)]
        beta = beta_inner[level] if level < idpf.BITS - 1 else beta_leaf
        _compare(f"eval at level {level} on alpha's path", beta, values[0])
        _compare(f"eval at level {level} off alpha's path", field.zeros(idpf.VALUE_LEN), values[1])


class VdafReplay:
    """Runs one Prio3 file's operations in order, keeping the verification states they produce."""

    # Names the field of an encoded public share that holds a byte, where the VDAF's layout has fields.
    where_in_public_share: Callable[[int], str] | None = None

    def __init__(self, vdaf: Prio3 | Poplar1, data: dict[str, Any]) -> None:
        self.vdaf = vdaf
        self.data = data
        self.ctx = bytes.fromhex(data["ctx"])
        self.verify_key = bytes.fromhex(data["verify_key"])
        self.states: dict[tuple[int, int], VerifyState] = {}

    def run(self, op: dict[str, Any]) -> None:
        """Run one operation; Mismatch if its output or its success differs from the file's."""
        name = op["operation"]
        step = getattr(self, f"_{name}", None)
        if step is None:
            raise Mismatch(f"unknown operation {name!r}")
        if op["success"]:
            step(op)
            return
        try:
            step(op)
        except VdafError:
            return
        raise Mismatch("the operation succeeded but the file says it must fail")

    def _report(self, op: dict[str, Any]) -> dict[str, Any]:
        return self.data["reports"][op["report_index"]]

    def _shard(self, op: dict[str, Any]) -> None:
        report = self._report(op)
        public_share, input_shares = self.vdaf.shard(
            self.ctx, report["measurement"], bytes.fromhex(report["nonce"]), bytes.fromhex(report["rand"])
        )
        _compare(
            "public_share",
            report["public_share"],
            self.vdaf.encode_public_share(public_share).hex(),  # type: ignore[arg-type]
            self.where_in_public_share,
        )
        for j, (expected, share) in enumerate(zip(report["input_shares"], input_shares, strict=True)):
            _compare(f"input_shares[{j}]", expected, self.vdaf.encode_input_share(share).hex())

    def _verify_init(self, op: dict[str, Any]) -> None:
        report, agg_id = self._report(op), op["aggregator_id"]
        state, verifier_share = self.vdaf.verify_init(
            self.verify_key,
            self.ctx,
            agg_id,
            None,
            bytes.fromhex(report["nonce"]),
            self.vdaf.decode_public_share(bytes.fromhex(report["public_share"])),
            self.vdaf.decode_input_share(agg_id, bytes.fromhex(report["input_shares"][agg_id])),
        )
        self.states[(op["report_index"], agg_id)] = state
        _compare(
            f"verifier_shares[0][{agg_id}]",
            report["verifier_shares"][0][agg_id],
            self.vdaf.encode_verifier_share(verifier_share).hex(),
        )

    def _verifier_shares_to_message(self, op: dict[str, Any]) -> None:
        report, round_ = self._report(op), op["round"]
        shares = [self.vdaf.decode_verifier_share(bytes.fromhex(s)) for s in report["verifier_shares"][round_]]
        message = self.vdaf.verifier_shares_to_message(self.ctx, None, shares)
        _compare(
            f"verifier_messages[{round_}]",
            report["verifier_messages"][round_],
            self.vdaf.encode_verifier_message(message).hex(),
        )

    def _verify_next(self, op: dict[str, Any]) -> None:
        report, agg_id, round_ = self._report(op), op["aggregator_id"], op["round"]
        state = self.states.get((op["report_index"], agg_id))
        if state is None:
            raise Mismatch("no verification state: verify_init did not run for this report and aggregator")
        message = self.vdaf.decode_verifier_message(bytes.fromhex(report["verifier_messages"][round_ - 1]))
        out_share = self.vdaf.verify_next(self.ctx, state, message)
        _compare(f"out_shares[{agg_id}]", report["out_shares"][agg_id], self.vdaf.encode_agg_share(out_share).hex())

    def _aggregated_reports(self) -> list[dict[str, Any]]:
        return [report for report in self.data["reports"] if report["out_shares"]]

    def _aggregate(self, op: dict[str, Any]) -> None:
        agg_id = op["aggregator_id"]
        out_shares = [
            self.vdaf.decode_agg_share(bytes.fromhex(report["out_shares"][agg_id]))
            for report in self._aggregated_reports()
        ]
        agg_share = self.vdaf.aggregate(out_shares)
        _compare(f"agg_shares[{agg_id}]", self.data["agg_shares"][agg_id], self.vdaf.encode_agg_share(agg_share).hex())

    def _unshard(self, op: dict[str, Any]) -> None:
        agg_shares = [self.vdaf.decode_agg_share(bytes.fromhex(s)) for s in self.data["agg_shares"]]
        result = self.vdaf.unshard(None, agg_shares, len(self._aggregated_reports()))
        _compare("agg_result", self.data["agg_result"], result)


class Poplar1Replay(VdafReplay):
    """Runs one Poplar1 file: two rounds of verification, and every message decoded under the file's
    aggregation parameter (its level picks the field, its prefixes the length of the shares)."""

    vdaf: Poplar1

    def __init__(self, vdaf: Poplar1, data: dict[str, Any]) -> None:
        super().__init__(vdaf, data)
        self.agg_param = vdaf.decode_agg_param(bytes.fromhex(data["agg_param"]))
        _compare(
            "agg_param (decoded and encoded again)", data["agg_param"], vdaf.encode_agg_param(self.agg_param).hex()
        )
        self.states: dict[tuple[int, int], Poplar1VerifyState] = {}  # type: ignore[assignment]

    def where_in_public_share(self, byte: int) -> str:  # type: ignore[override]
        return public_share_field(self.vdaf.idpf, byte)

    def _verify_init(self, op: dict[str, Any]) -> None:
        report, agg_id = self._report(op), op["aggregator_id"]
        state, verifier_share = self.vdaf.verify_init(
            self.verify_key,
            self.ctx,
            agg_id,
            self.agg_param,
            bytes.fromhex(report["nonce"]),
            self.vdaf.decode_public_share(bytes.fromhex(report["public_share"])),
            self.vdaf.decode_input_share(agg_id, bytes.fromhex(report["input_shares"][agg_id])),
        )
        self.states[(op["report_index"], agg_id)] = state
        _compare(
            f"verifier_shares[0][{agg_id}] (the masked sketch)",
            report["verifier_shares"][0][agg_id],
            self.vdaf.encode_verifier_share(self.agg_param, verifier_share).hex(),
        )

    def _verifier_shares_to_message(self, op: dict[str, Any]) -> None:
        report, round_ = self._report(op), op["round"]
        shares = [
            self.vdaf.decode_verifier_share(self.agg_param, bytes.fromhex(share))
            for share in report["verifier_shares"][round_]
        ]
        message = self.vdaf.verifier_shares_to_message(self.ctx, self.agg_param, shares)
        _compare(
            f"verifier_messages[{round_}]",
            report["verifier_messages"][round_],
            self.vdaf.encode_verifier_message(self.agg_param, message).hex(),
        )

    def _verify_next(self, op: dict[str, Any]) -> None:
        report, agg_id, round_ = self._report(op), op["aggregator_id"], op["round"]
        state = self.states.get((op["report_index"], agg_id))
        if state is None:
            raise Mismatch("no verification state: an earlier round did not run for this report and aggregator")
        message = self.vdaf.decode_verifier_message(
            self.agg_param, bytes.fromhex(report["verifier_messages"][round_ - 1])
        )
        result = self.vdaf.verify_next(self.ctx, state, message)
        if round_ < self.vdaf.ROUNDS:
            if not isinstance(result, tuple):
                raise Mismatch(f"verify_next gave an output share in round {round_} of {self.vdaf.ROUNDS}")
            self.states[(op["report_index"], agg_id)], verifier_share = result
            _compare(
                f"verifier_shares[{round_}][{agg_id}] (the sketch check)",
                report["verifier_shares"][round_][agg_id],
                self.vdaf.encode_verifier_share(self.agg_param, verifier_share).hex(),
            )
            return
        if isinstance(result, tuple):
            raise Mismatch(f"verify_next gave no output share after round {round_}")
        _compare(
            f"out_shares[{agg_id}]",
            report["out_shares"][agg_id],
            self.vdaf.encode_agg_share(self.agg_param, result).hex(),
        )

    def _aggregate(self, op: dict[str, Any]) -> None:
        agg_id = op["aggregator_id"]
        out_shares = [
            self.vdaf.decode_agg_share(self.agg_param, bytes.fromhex(report["out_shares"][agg_id]))
            for report in self._aggregated_reports()
        ]
        agg_share = self.vdaf.aggregate(self.agg_param, out_shares)
        _compare(
            f"agg_shares[{agg_id}]",
            self.data["agg_shares"][agg_id],
            self.vdaf.encode_agg_share(self.agg_param, agg_share).hex(),
        )

    def _unshard(self, op: dict[str, Any]) -> None:
        agg_shares = [self.vdaf.decode_agg_share(self.agg_param, bytes.fromhex(s)) for s in self.data["agg_shares"]]
        result = self.vdaf.unshard(self.agg_param, agg_shares, len(self._aggregated_reports()))
        _compare("agg_result", self.data["agg_result"], result)


def replay_for(path: Path, data: dict[str, Any]) -> VdafReplay:
    vdaf = vdaf_for(path.stem, data)
    return Poplar1Replay(vdaf, data) if isinstance(vdaf, Poplar1) else VdafReplay(vdaf, data)


def _describe(index: int, op: dict[str, Any]) -> str:
    """e.g. "operation 20 (verify_init, report 3, aggregator 1)"."""
    if index < 0:
        return "reading the file"
    labels = {"report_index": "report", "aggregator_id": "aggregator", "round": "round"}
    where = "".join(f", {label} {op[key]}" for key, label in labels.items() if key in op)
    return f"operation {index} ({op.get('operation')}{where})"


def _family(path: Path) -> str:
    """What a vector file checks, from its name: ``Prio3Count_0`` -> ``Prio3Count``."""
    return path.stem.split("_", 1)[0]


def _check_alone(path: Path, what: str, check: Callable[[], None]) -> list[str]:
    """Problems of a file that checks one primitive alone (an XOF, the IDPF): no operations to replay."""
    try:
        check()
    except Mismatch as error:
        return [f"{path}: {what}: {error}"]
    except VdafError as error:
        return [f"{path}: {what}: refused but the file says it succeeds: {error}"]
    except (KeyError, IndexError, TypeError, ValueError) as error:
        return [f"{path}: {what}: malformed test vector ({type(error).__name__}: {error})"]
    return []


def check_file(path: Path, data: dict[str, Any]) -> list[str]:
    """Problems found in one file (empty if it matches). Stops at a file's first problem: later steps use its state."""
    if "derived_seed" in data:
        return _check_alone(path, "XOF check", lambda: check_xof(xof_for(path.stem), data))
    if _family(path) == "IdpfBBCGGI21":
        return _check_alone(path, "IDPF check", lambda: check_idpf(data))
    # The operation under way, for the message: (-1, {}) while the file itself is read.
    current: tuple[int, dict[str, Any]] = (-1, {})
    try:
        replay = replay_for(path, data)
        for current in enumerate(data["operations"]):
            replay.run(current[1])
    except Mismatch as error:
        return [f"{path}: {_describe(*current)}: {error}"]
    except VdafError as error:
        return [f"{path}: {_describe(*current)}: refused but the file says it succeeds: {error}"]
    except (KeyError, IndexError, TypeError, ValueError) as error:
        # A field the schema requires is missing or of the wrong type: the file cannot match.
        return [f"{path}: {_describe(*current)}: malformed test vector ({type(error).__name__}: {error})"]
    return []


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict):
        raise UsageError(f"{path} does not hold a test vector object")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m privacy.vdaf.check_vectors",
        description=(
            "Check draft-irtf-cfrg-vdaf-20 test vectors (Prio3*, Poplar1, IdpfBBCGGI21, XofTurboShake128,"
            " XofFixedKeyAes128) against privacy.vdaf."
        ),
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE.json")
    args = parser.parse_args(argv)
    try:
        loaded = [(path, _load(path)) for path in args.files]
        for path, data in loaded:
            if "derived_seed" in data:
                xof_for(path.stem)
            elif _family(path) != "IdpfBBCGGI21":
                vdaf_for(path.stem, data)
    except UsageError as error:
        print(f"check_vectors: {error}", file=sys.stderr)
        return 2

    failed = 0
    for path, data in loaded:
        problems = check_file(path, data)
        if problems:
            failed += 1
            print("FAIL " + "\n".join(problems))
        else:
            steps = f"{len(data['operations'])} operations" if "operations" in data else _ALONE[_family(path)]
            print(f"ok   {path} ({steps})")
    print(f"{len(loaded) - failed} of {len(loaded)} files match")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
