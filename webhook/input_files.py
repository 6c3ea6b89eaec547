"""How every command (and the server) says that an input file cannot be read: one message,
``<path>: cannot be read: <reason>``, whichever option named the file (a manifest, a policy,
cluster state, a certificate, a kubeconfig)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

from policies.config import PolicyError, PolicyProblem


def cannot_read(exc: OSError | UnicodeDecodeError) -> str:
    """The reason, as the system words it ("No such file or directory", "Permission denied")."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return f"cannot be read: {reason}"


def unreadable(path: Path | str) -> str | None:
    """None when ``path`` opens for reading; otherwise the message."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return f"{path}: {cannot_read(exc)}"
    return None


def missing(path: Path | str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))


class UnreadablePolicyFile(PolicyError):
    """A policy file that could not be read at all: nothing in it to list problems of, so it
    is said in the one line every command uses for a file it cannot read."""

    def __init__(self, path: Path | str, exc: OSError | UnicodeDecodeError) -> None:
        self.reason = cannot_read(exc)
        super().__init__([PolicyProblem("", self.reason)], str(path))

    def summary(self) -> str:
        return f"{self.source}: {self.reason}"

    def first_line(self) -> str:
        return self.summary()
