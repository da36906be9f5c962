"""The Prio3 checker's command line (python -m privacy.vdaf.check_vectors), run as a process over the repository's
copy of the draft's test vectors. Its verdict on each file, in process, is tested in tests/unit/privacy/test_vdaf.py;
here the exit status and the summary line are what a person running the command sees."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.vectors import VDAF_VECTOR_FILES, vdaf_vectors_required

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_check_vectors_cli_over_every_file_exits_zero() -> None:
    vdaf_vectors_required()
    result = subprocess.run(
        [sys.executable, "-m", "privacy.vdaf.check_vectors", *map(str, VDAF_VECTOR_FILES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(VDAF_VECTOR_FILES)} of {len(VDAF_VECTOR_FILES)} files match" in result.stdout
