"""Errors of the VDAF package: every refusal is a ValueError, so callers may catch either."""

from __future__ import annotations

from typing import Any


class VdafError(ValueError):
    """Base class of every error this package raises on purpose."""


class DecodeError(VdafError):
    """A message does not parse: wrong length, or a field element not below the modulus."""


class MeasurementError(VdafError):
    """A client's measurement is outside the VDAF's domain (refused before any sharding)."""


class VerifyError(VdafError):
    """The aggregators reject a report: a proof check or the joint randomness check failed."""


def verify_init_checked(vdaf: Any, verify_key: bytes, nonce: bytes, agg_id: int) -> None:
    """The checks every VDAF's verify_init starts with (draft-20, Section 5.8): the verification
    key's and the nonce's sizes, and an aggregator id among the VDAF's shares."""
    if len(verify_key) != vdaf.VERIFY_KEY_SIZE:
        raise VdafError("incorrect verify_key size")
    if len(nonce) != vdaf.NONCE_SIZE:
        raise VdafError("incorrect nonce size")
    if agg_id not in range(vdaf.SHARES):
        raise VdafError("agg_id out of range")
