"""Owner-only files and directories, and a durable fsync, shared by the file-based stores.

An event log holds job names, endpoint ids and worker output: nobody but its owner needs to
read it. Directories the stores create are 0700 (every missing parent, not only the last
one) and files 0600; existing directories are left as they are.
"""

from __future__ import annotations

import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private_dirs(directory: Path) -> None:
    """Create `directory` and any missing parent with mode 0700."""
    missing: list[Path] = []
    for part in (directory, *directory.parents):
        if part.exists():
            break
        missing.append(part)
    for part in reversed(missing):
        try:
            os.mkdir(part, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(part, DIR_MODE)  # the umask may have taken bits away; never added any


def create_private_file(path: Path) -> bool:
    """Create `path` empty with mode 0600 unless it exists; True when this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def fsync_fd(fd: int) -> None:
    """Flush a file to stable storage (F_FULLFSYNC where plain fsync stops at the disk cache)."""
    full = getattr(fcntl, "F_FULLFSYNC", None) if fcntl is not None else None
    if full is not None:  # pragma: no cover - macOS
        try:
            fcntl.fcntl(fd, full)
            return
        except OSError:
            pass
    os.fsync(fd)


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (a newly created file) durable; a no-op where unsupported."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms that cannot open a directory
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
