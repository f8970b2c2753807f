"""Where Frontier caches derived files (token counts, imported profiles, fitted bundles)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$FRONTIER_CACHE_DIR`` if set, else ``~/.cache/frontier``."""
    return Path(os.environ.get("FRONTIER_CACHE_DIR") or Path.home() / ".cache" / "frontier")
