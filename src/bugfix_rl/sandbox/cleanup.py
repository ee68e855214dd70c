"""Removing what a job left in its run dir: `remove_tree`, safe on any tree model code can build.

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages.
The server calls it after each job (the run dir, and anything beside it in the scratch dir) and for
its own scratch dir when it exits without the private tmpfs.
"""

from __future__ import annotations

import contextlib
import os

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: str) -> bool:
    """`rm -rf path` for a tree a job built: without recursion (a job can nest directories far past
    Python's recursion limit and PATH_MAX), with one directory fd open at a time (walking back up
    through `..`), never following a symbolic link, and without raising. True when `path` is gone."""
    try:
        fd = os.open(path, _DIRECTORY)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return not os.path.lexists(path)
    pending = [_remove_files(fd)]  # per level from `path` down: subdirectories still to remove
    try:
        while pending:
            if pending[-1]:
                child = _open_subdirectory(pending[-1][-1], fd)
                if child is None:
                    pending[-1].pop()
                    continue
                os.close(fd)
                fd = child
                pending.append(_remove_files(fd))
                continue
            pending.pop()
            if pending:  # this level is empty: go up and remove it
                parent = os.open("..", _DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = parent
                with contextlib.suppress(OSError):
                    os.rmdir(pending[-1].pop(), dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(path)
    return not os.path.lexists(path)


def _remove_files(fd: int) -> list[str]:
    """Unlink every entry of the directory `fd` that is not a directory; return the subdirectories."""
    directories = []
    try:
        entries = list(os.scandir(fd))
    except OSError:
        return directories
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                directories.append(entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
        except OSError:
            pass
    return directories


def _open_subdirectory(name: str, parent: int) -> int | None:
    """The directory `name` in `parent`, made accessible first if the job took its permissions away
    (matters without root); None if it cannot be opened (then it is unlinked if it is not a directory)."""
    for attempt in range(2):
        try:
            return os.open(name, _DIRECTORY, dir_fd=parent)
        except PermissionError:
            if attempt == 0:
                with contextlib.suppress(OSError):
                    os.chmod(name, 0o700, dir_fd=parent)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=parent)
            return None
    return None
