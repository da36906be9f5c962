"""Published test vectors the suite conforms to, kept inside the repository (see README.md in each folder).

The tests read them from here and from nowhere else: a fresh clone is all the suite needs.
"""

from __future__ import annotations

from pathlib import Path

# draft-irtf-cfrg-vdaf-20's test_vec/ folder, as published: the XOFs' files, the IDPF's, vdaf/Poplar1*.json and vdaf/Prio3*.json.
VDAF_VECTORS = Path(__file__).resolve().parent / "vdaf"
# Exactly the files privacy.vdaf conforms to: every Prio3 variant the draft has vectors for (the *_bad_* ones are
# negative cases), Poplar1 (the draft has no negative Poplar1 file), its IDPF and both XOFs.
VDAF_VECTOR_NAMES = (
    "XofTurboShake128.json",
    "XofFixedKeyAes128.json",
    "IdpfBBCGGI21_0.json",
    "vdaf/Poplar1_0.json",
    "vdaf/Poplar1_1.json",
    "vdaf/Poplar1_2.json",
    "vdaf/Poplar1_3.json",
    "vdaf/Prio3Count_0.json",
    "vdaf/Prio3Count_1.json",
    "vdaf/Prio3Count_2.json",
    "vdaf/Prio3Count_bad_gadget_poly.json",
    "vdaf/Prio3Count_bad_helper_seed.json",
    "vdaf/Prio3Count_bad_meas_share.json",
    "vdaf/Prio3Count_bad_wire_seed.json",
    "vdaf/Prio3Histogram_0.json",
    "vdaf/Prio3Histogram_1.json",
    "vdaf/Prio3Histogram_2.json",
    "vdaf/Prio3MultihotCountVec_0.json",
    "vdaf/Prio3MultihotCountVec_1.json",
    "vdaf/Prio3SumVec_0.json",
    "vdaf/Prio3SumVec_1.json",
)
# The list is fixed, not globbed: a missing file is then a failing test, never a parameter that silently vanishes.
VDAF_VECTOR_FILES = tuple(VDAF_VECTORS / name for name in VDAF_VECTOR_NAMES)


def vdaf_vectors_required() -> None:
    """Fail (never skip) when a vector file is missing: conformance that is not checked is not known."""
    missing = [str(path) for path in VDAF_VECTOR_FILES if not path.is_file()]
    assert not missing, f"the draft's test vectors are missing from the repository: {', '.join(missing)}"
