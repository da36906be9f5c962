"""Errors of the VDAF package: every refusal is a ValueError, so callers may catch either."""

from __future__ import annotations


class VdafError(ValueError):
    """Base class of every error this package raises on purpose."""


class DecodeError(VdafError):
    """A message does not parse: wrong length, or a field element not below the modulus."""


class MeasurementError(VdafError):
    """A client's measurement is outside the VDAF's domain (refused before any sharding)."""


class VerifyError(VdafError):
    """The aggregators reject a report: a proof check or the joint randomness check failed."""
