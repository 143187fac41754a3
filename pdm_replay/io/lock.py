"""One writer per output directory: an OS file lock on ``DIR/.lock``.

``fcntl.flock`` locks belong to the open file: the kernel releases them when the process
exits in any way (SIGKILL included), so a lock is never stale, and the lock file itself
is never removed while the directory lives (removing it would let two processes lock two
different files of the same name). The holder's PID is written into the file so that a
second writer can say who holds it. Readers (``report``, ``dashboard``) never lock.

Examples
--------
>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp()) / "run"
>>> with DirLock(d) as lock:
...     try:
...         DirLock(d).__enter__()
...     except DirLocked as exc:
...         print("PID" in str(exc), lock.created)
True True
>>> sorted(p.name for p in d.iterdir())
['.lock']
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from types import TracebackType

from pdm_replay.errors import FieldError

LOCK_NAME = ".lock"


class DirLocked(FieldError):
    """Another process is writing the directory (its fix names the ``out`` field)."""


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return f"PID {text}" if text.isdigit() else "PID unknown"


class DirLock:
    """Hold the exclusive lock of ``root`` (created, with its parents, if missing).

    ``created`` says whether this lock created ``root``; :meth:`release` with
    ``remove_if_empty`` removes it again when nothing but the lock file was written (a
    start that failed its checks leaves no directory behind).
    """

    def __init__(self, root: Path | str, what: str = "run directory") -> None:
        self.root, self.what = Path(root), what
        self.created = False
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self.root / LOCK_NAME

    def acquire(self) -> "DirLock":
        self.created = not self.root.exists()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise FieldError("exists and is not a directory; choose another {out}",
                             file=self.root) from None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise DirLocked("another process ({holder}) is writing this {what}",
                            file=self.root, fix="wait for it to finish (or stop it), or "
                            "choose another {out}", holder=holder, what=self.what) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def only_lock_inside(self) -> bool:
        """True when ``root`` holds nothing but the lock file."""
        return all(p.name == LOCK_NAME for p in self.root.iterdir())

    def release(self, remove_if_empty: bool = False) -> None:
        if self._fd is None:
            return
        if remove_if_empty and self.created and self.only_lock_inside():
            shutil.rmtree(self.root, ignore_errors=True)  # still locked: nobody else writes
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "DirLock":
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release(remove_if_empty=exc_type is not None)
