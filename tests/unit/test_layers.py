"""The layers of docs/architecture.md hold: the import contracts in pyproject.toml are all kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_import_contract_is_kept() -> None:
    linter = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(linter), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_broken_layer_is_caught(tmp_path: Path) -> None:
    """The contracts would see an upward import: services importing the adaptive runs built on them."""
    config = tmp_path / "contracts.toml"
    config.write_text((ROOT / "pyproject.toml").read_text())
    probe = ROOT / "analyses" / "services" / "_layer_probe.py"
    probe.write_text("import analyses.adaptive.chain  # noqa: F401\n")
    try:
        linter = Path(sys.executable).parent / "lint-imports"
        result = subprocess.run(
            [str(linter), "--no-cache", "--config", str(config)], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
    finally:
        probe.unlink()
    assert result.returncode != 0
    assert "analyses.services._layer_probe -> analyses.adaptive.chain" in result.stdout
