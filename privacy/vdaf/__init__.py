"""Prio3 and Poplar1 of draft-irtf-cfrg-vdaf-20 ("Verifiable Distributed Aggregation Functions"), in pure Python.

Modules, each citing the sections it implements: ``field`` (Field64, Field128, Field255, Section 6.1), ``xof``
(XofTurboShake128, XofFixedKeyAes128, Section 6.2), ``flp`` (the FLP and its gadgets, Section 7.3 and Appendix A),
``circuits`` (Count, Sum, SumVec, Histogram, MultihotCountVec, Section 7.4), ``prio3`` (sharding,
verification, aggregation, unsharding, Section 7.2), ``batch`` (many reports verified at once with
numpy, agreeing byte for byte with ``prio3``), ``limbs`` (Field128 in numpy), ``idpf`` (the IDPF of
BBCGGI21, Section 8.3), ``poplar1`` (Poplar1, Section 8.2) and ``check_vectors`` (the draft's test
vectors). No Django here: the package imports numpy, pycryptodome, cryptography and the stdlib.
"""

from __future__ import annotations

from privacy.vdaf.errors import DecodeError, MeasurementError, VdafError, VerifyError
from privacy.vdaf.poplar1 import Poplar1
from privacy.vdaf.prio3 import (
    Prio3,
    Prio3Count,
    Prio3Histogram,
    Prio3MultihotCountVec,
    Prio3Sum,
    Prio3SumVec,
)

__all__ = [
    "DecodeError",
    "MeasurementError",
    "Poplar1",
    "Prio3",
    "Prio3Count",
    "Prio3Histogram",
    "Prio3MultihotCountVec",
    "Prio3Sum",
    "Prio3SumVec",
    "VdafError",
    "VerifyError",
]
