"""Checks of a command's output paths before it does its work, so a long run is not lost at its end.

A folder option naming a file, a file option naming a folder, or a path under a file used to
end a finished simulation, fit or import in a traceback (FileExistsError, IsADirectoryError,
NotADirectoryError). These checks create nothing.
"""

from __future__ import annotations

import os
from pathlib import Path


def check_dir_path(flag: str, path: str | Path) -> None:
    """ValueError (one line) unless ``path`` is a directory, or a folder that can be created."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{flag} {path} exists and is not a directory")
    _check_creatable(flag, p)


def check_file_path(flag: str, path: str | Path) -> None:
    """ValueError (one line) unless ``path`` can be written as a file (its folder existing or
    creatable, the path itself not a folder)."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file path")
    _check_creatable(flag, p.parent)


def _check_creatable(flag: str, folder: Path) -> None:
    """The nearest existing folder at or above ``folder`` must be a directory this process may write."""
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{flag}: {probe} is not a directory" if probe == folder
                         else f"{flag}: {probe} is not a directory, so {folder} cannot be created")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}: {probe} is not writable")
