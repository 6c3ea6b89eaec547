"""A TLS server context that follows its certificate and key files as they are replaced.

service-ca, cert-manager and the kubelet renew a mounted ``kubernetes.io/tls`` Secret by writing
the new files into a fresh directory and swapping the ``..data`` symlink, so the paths stay the
same while the files behind them change. The server must then serve the new certificate without a
restart, and without failing a request while the files are half replaced.

Two ways in, so every server shape is covered:

- ``context()`` for servers that build a context per connection (gunicorn's sync and gthread
  workers call their ``ssl_context`` hook on every accepted connection);
- the ``sni_callback`` of every context made here, called by OpenSSL on each ClientHello (also
  when the client sends no server name), which swaps in the current context for servers that
  keep one context for their lifetime.

The files are looked at (``os.stat``, no reading) at most once per ``check_interval``. A change is
loaded into a new context; if that fails — the key does not match the certificate yet, a file is
missing or half written — the context that works stays in use and the next check tries again.
"""
from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

from certs.inspection import describe_serving_cert

ContextLoader = Callable[[], ssl.SSLContext]
# What identifies one version of a file: a symlink swap changes the inode, a rewrite the mtime.
FileSignature = tuple[int, int, int, int]

DEFAULT_CHECK_INTERVAL = 1.0


def server_context_loader(cert_file: str | Path, key_file: str | Path) -> ContextLoader:
    """A plain TLS 1.2+ server context with this certificate chain and key."""
    def load() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(certfile=str(cert_file), keyfile=str(key_file))
        return context
    return load


class ReloadingServerContext:
    def __init__(self, cert_file: str | Path, key_file: str | Path, load: ContextLoader | None = None, *,
                 check_interval: float = DEFAULT_CHECK_INTERVAL,
                 log: logging.Logger | None = None,
                 on_reload: Callable[[Path], object] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 also_watch: tuple[str | Path, ...] = ()) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        # Other files ``load`` reads (the CA that client certificates must chain to): a change to
        # one of them loads a new context too.
        self.also_watch = tuple(Path(path) for path in also_watch)
        self._load = load or server_context_loader(cert_file, key_file)
        self._check_interval = check_interval
        self._log = log or logging.getLogger(__name__)
        self._on_reload = on_reload
        self._clock = clock
        self._lock = threading.Lock()
        # The signature is taken before loading: if the files change during a load, the next
        # check sees a difference and loads again.
        signature = self._signature()
        self._current = self._new_context()
        self._loaded_signature: tuple[FileSignature, ...] | None = signature
        self._failed_signature: tuple[FileSignature, ...] | None = None
        self._next_check = clock() + check_interval

    def context(self) -> ssl.SSLContext:
        """The context for the files as they are now (checked at most once per interval)."""
        if self._clock() >= self._next_check:
            with self._lock:
                if self._clock() >= self._next_check:
                    self._refresh()
                    self._next_check = self._clock() + self._check_interval
        return self._current

    def _refresh(self) -> None:
        try:
            signature = self._signature()
        except OSError as exc:
            # Between the removal of the old files and the swap in of the new ones: try again later.
            self._log.debug("certificate files not readable right now (%s); keeping the loaded ones", exc)
            return
        if signature == self._loaded_signature or signature == self._failed_signature:
            return
        try:
            context = self._new_context()
        except (OSError, ssl.SSLError, ValueError) as exc:
            self._failed_signature = signature
            self._log.warning("could not load the replaced certificate %s and key %s%s (%s); still serving the "
                              "previous certificate, trying again when the files change",
                              self.cert_file, self.key_file, self._also_watched(), exc)
            return
        self._current, self._loaded_signature, self._failed_signature = context, signature, None
        self._log.info("reloaded serving certificate: %s%s", describe_serving_cert(self.cert_file),
                       self._also_watched(" (with %s)"))
        if self._on_reload is not None:
            try:
                self._on_reload(self.cert_file)
            except Exception:  # noqa: BLE001 - a reporting problem must not undo a good reload
                self._log.exception("after reloading the serving certificate")

    def _also_watched(self, template: str = " and %s") -> str:
        return template % ", ".join(map(str, self.also_watch)) if self.also_watch else ""

    def _new_context(self) -> ssl.SSLContext:
        context = self._load()
        context.sni_callback = self._on_client_hello
        return context

    def _on_client_hello(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                         context: ssl.SSLContext) -> None:
        try:
            current = self.context()
            if current is not context:
                connection.context = current
        except Exception:  # noqa: BLE001 - an exception here would abort the handshake; serve what we have
            self._log.exception("certificate reload check failed during a TLS handshake")

    def _signature(self) -> tuple[FileSignature, ...]:
        return tuple(_file_signature(path) for path in (self.cert_file, self.key_file, *self.also_watch))


def _file_signature(path: Path) -> FileSignature:
    st = os.stat(path)  # follows the symlinks, so a swapped ..data directory shows as a new inode
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
