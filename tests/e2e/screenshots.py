"""The browser tests' screenshots for docs/screenshots: kept only when PFS_SCREENSHOTS names a folder."""

from __future__ import annotations

import os
from pathlib import Path

SCREENSHOTS = os.environ.get("PFS_SCREENSHOTS")  # set to a folder to keep the pages as PNGs


def shot(page, name: str, locator=None) -> None:
    """The whole page as ``name``.png, or only ``locator`` when given."""
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        target = locator if locator is not None else page
        kwargs = {} if locator is not None else {"full_page": True}
        target.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), **kwargs)
