"""The last good policy of one server, shared by all its worker processes through a file.

Each worker watches the policy file on its own (``webhook.policy_reload``). A worker that
gunicorn starts later (after a crash, an OOM kill, a timeout, a ``SIGHUP`` or ``--max-requests``)
reads the file as it is then; when the file is invalid or gone at that moment, the worker must
serve what the running workers serve (the last policy that was good), not the one the server
started with: otherwise one pod answers the same request two ways.

So every worker that loads a policy successfully also keeps its text here, and a new worker
falls back on it. The store is one small file in a directory ``serve`` makes before gunicorn
forks (under ``TMPDIR``: a memory-backed ``emptyDir`` in the Deployment, so nothing survives the
pod, and a restarted container starts from the file again, as it should):

- written atomically (a temporary file renamed over it), so a reader sees a whole version;
- ordered by the policy file's modification time: two workers that pick up two quick edits in
  a different order cannot leave the older one in the store (a ``flock`` makes the compare and
  the write one step);
- holding the text, not a pickled object: a new worker parses it again with its own code.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

FILE_NAME = "last-good-policy.json"


@dataclass(frozen=True)
class KeptPolicy:
    text: bytes  # the policy file's content, as read
    digest: str  # its sha256, shortened as the logs and /readyz show it
    loaded_at: float  # when a worker loaded it (Unix time)
    version: int  # the policy file's st_mtime_ns when it was read: the newer version wins


class LastGoodPolicy:
    """The store in ``directory``: ``keep()`` after a successful load, ``read()`` at start."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.file = self.directory / FILE_NAME

    @classmethod
    def make(cls) -> LastGoodPolicy:
        """A fresh store in a new private directory (the server's master, before it forks)."""
        return cls(Path(tempfile.mkdtemp(prefix="mpijob-webhook-policy-")))

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def keep(self, kept: KeptPolicy) -> bool:
        """Store ``kept`` unless the store holds a newer version; whether it was stored."""
        with self._locked():
            current = self.read()
            if current is not None and current.version > kept.version:
                return False
            if current == kept:
                return True
            record = {"digest": kept.digest, "loadedAt": kept.loaded_at, "version": kept.version,
                      "text": kept.text.decode("utf-8")}  # a policy that loaded is UTF-8 text
            handle, staged = tempfile.mkstemp(prefix=".staged-", dir=self.directory)
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    json.dump(record, out)
                os.replace(staged, self.file)
            except BaseException:
                Path(staged).unlink(missing_ok=True)
                raise
            return True

    def read(self) -> KeptPolicy | None:
        """What the store holds; None if nothing was kept yet or the store is unreadable."""
        try:
            record = json.loads(self.file.read_text(encoding="utf-8"))
            return KeptPolicy(record["text"].encode("utf-8"), str(record["digest"]), float(record["loadedAt"]),
                              int(record["version"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("the last good policy kept in %s cannot be read: %s", self.file, exc)
            return None

    def _locked(self) -> _Flock:
        return _Flock(self.directory / ".lock")


class _Flock:
    """An exclusive ``flock`` on ``path`` for the length of a ``with`` block."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd = -1

    def __enter__(self) -> None:
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)  # closing releases the lock
