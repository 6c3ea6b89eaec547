"""The attack side of ``bench soak`` (``bench.soak``), run in a process of its own so that it
does not slow the measuring clients. Loopback only; every attack is bounded in count and time and
stops by itself when told to.

An attack is one or more parts run at once (``PARTS``): ``one-byte``, ``silent``, ``dribble``
(request heads at 1 byte/s), ``big-bodies`` (valid near-maximum reviews), ``stalled-bodies``
(a whole request head, then the body trickled at one byte per 2 s) and ``partial-bodies``
(7 MiB announced, half sent, then trickled); each reopened as the server closes it.
"""
from __future__ import annotations

import http.client
import resource
import selectors
import socket
import ssl
import threading
import time
from typing import Any

API_SERVER_TIMEOUT = 30.0  # the longest a webhook call may take (timeoutSeconds: 30)
BIG_BODY_BYTES = 7 * 1024 * 1024 - 16 * 1024  # just under the server's limit (webhook.review)
STALLED_HEAD = (b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n")
TRICKLE_SECONDS = 2.0  # a stalled body's one byte per this long


def _raise_open_files(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted,
                                                    hard))


def _stallers(port: int, count: int, first: bytes, stop: Any, ready: Any) -> dict[str, Any]:
    """``count`` connections that send ``first`` (maybe nothing) and then nothing more."""
    selector = selectors.DefaultSelector()
    opened = closed_by_server = refused = 0

    def open_one() -> bool:
        nonlocal opened, refused
        sock = socket.socket()
        sock.settimeout(2.0)
        try:
            sock.connect(("127.0.0.1", port))
            if first:
                sock.sendall(first)
        except OSError:
            sock.close()
            refused += 1
            return False
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        opened += 1
        return True

    while len(selector.get_map()) < count and not stop.is_set():
        if not open_one():
            time.sleep(0.01)
    ready.set()
    while not stop.is_set():
        for key, _ in selector.select(0.2):
            sock = key.fileobj
            try:
                data = sock.recv(4096)  # type: ignore[union-attr]
            except OSError:
                data = b""
            if not data:
                selector.unregister(sock)
                sock.close()  # type: ignore[union-attr]
                closed_by_server += 1
        while len(selector.get_map()) < count and not stop.is_set():
            if not open_one():
                break
    for key in list(selector.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    return {"connections opened": opened, "closed by the server": closed_by_server, "connect failures": refused}


def _dribblers(port: int, count: int, ca_file: str, stop: Any, ready: Any) -> dict[str, Any]:
    """``count`` clients that send their request head one byte a second."""
    context = ssl.create_default_context(cafile=ca_file)
    head = b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-Slow: "
    opened = cut = failed = bytes_sent = 0

    def open_one() -> ssl.SSLSocket | None:
        nonlocal opened, failed
        try:
            sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                                       server_hostname="localhost")
        except OSError:
            failed += 1
            return None
        sock.setblocking(False)
        opened += 1
        return sock

    clients: list[tuple[ssl.SSLSocket | None, int]] = []
    while len(clients) < count and not stop.is_set():
        clients.append((open_one(), 0))
    ready.set()
    while not stop.wait(1.0):
        for index, (sock, sent) in enumerate(clients):
            if sock is None:
                clients[index] = (open_one(), 0)
                continue
            try:
                try:
                    if sock.recv(4096) == b"":
                        raise ConnectionResetError
                    raise ConnectionResetError  # any answer before the head is done ends it too
                except (ssl.SSLWantReadError, BlockingIOError):
                    pass
                sock.send(head[sent:sent + 1] if sent < len(head) else b"a")
                bytes_sent += 1
                clients[index] = (sock, sent + 1)
            except (OSError, ssl.SSLError):
                sock.close()
                cut += 1
                clients[index] = (open_one(), 0)
    for sock, _ in clients:
        if sock is not None:
            sock.close()
    return {"clients connected": opened, "cut by the server": cut, "handshake failures": failed,
            "bytes dribbled": bytes_sent}


def _big_bodies(port: int, count: int, ca_file: str, body: bytes, stop: Any, ready: Any) -> dict[str, Any]:
    """``count`` clients each sending big reviews, one after another, on a kept-alive connection."""
    context = ssl.create_default_context(cafile=ca_file)
    lock = threading.Lock()
    times: list[float] = []
    failures: list[str] = []

    def client() -> None:
        connection: http.client.HTTPSConnection | None = None
        while not stop.is_set():
            if connection is None:
                connection = http.client.HTTPSConnection("localhost", port, context=context,
                                                         timeout=API_SERVER_TIMEOUT + 30)
            started = time.monotonic()
            try:
                connection.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                answer = response.read()
                seconds = time.monotonic() - started
                with lock:
                    times.append(seconds)
                    if response.status != 200 or b'"uid"' not in answer:
                        failures.append(f"HTTP {response.status}: {answer[:200]!r}")
            except Exception as exc:  # noqa: BLE001 - counted
                with lock:
                    times.append(time.monotonic() - started)
                    failures.append(f"{type(exc).__name__}: {exc}")
                connection.close()
                connection = None
        if connection is not None:
            connection.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    ready.set()
    stop.wait()
    for thread in threads:
        thread.join(API_SERVER_TIMEOUT + 35)
    return {"big reviews answered": len(times) - len(failures), "big review failures": len(failures),
            "slowest big review s": round(max(times), 2) if times else None,
            "first big review failure": failures[0] if failures else ""}


def _stalled_bodies(port: int, count: int, ca_file: str, stop: Any, ready: Any, *, declared: int = 4096,
                    first: int = 0) -> dict[str, Any]:
    """``count`` clients that send a whole request head announcing ``declared`` bytes, then
    ``first`` bytes of the body as fast as the server takes them, then one byte every
    ``TRICKLE_SECONDS``; reopened as the server closes them (or answers them)."""
    context = ssl.create_default_context(cafile=ca_file)
    head = STALLED_HEAD % declared
    piece = b" " * 16384  # one TLS record: a send the socket refuses is retried whole
    opened = cut = failed = 0
    # per client: the socket, body bytes sent, when it last trickled
    clients: list[list[Any]] = []

    def open_one() -> list[Any]:
        nonlocal opened, failed
        try:
            sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                                       server_hostname="localhost")
            sock.sendall(head)
        except OSError:
            failed += 1
            return [None, 0, 0.0]
        sock.setblocking(False)
        opened += 1
        return [sock, 0, time.monotonic()]

    def push(client: list[Any], now: float) -> None:
        sock, sent, last = client
        try:
            try:
                sock.recv(4096)
                raise ConnectionResetError  # an answer, or the close, ends it
            except (ssl.SSLWantReadError, BlockingIOError):
                pass
            while sent < first:
                sent += sock.send(piece[:min(len(piece), first - sent)])
            if sent < declared - 1 and now - last >= TRICKLE_SECONDS:
                sent += sock.send(b" ")
                last = now
            client[1:] = [sent, last]
        except (ssl.SSLWantWriteError, BlockingIOError):
            client[1:] = [sent, last]
        except (OSError, ssl.SSLError):
            nonlocal cut
            sock.close()
            cut += 1
            client[:] = open_one()

    while len(clients) < count and not stop.is_set():
        clients.append(open_one())
    ready.set()
    while not stop.wait(0.1):
        now = time.monotonic()
        for client in clients:
            if client[0] is None:
                client[:] = open_one()
            else:
                push(client, now)
    for client in clients:
        if client[0] is not None:
            client[0].close()
    return {"clients connected": opened, "cut or answered by the server": cut, "connect failures": failed}


def _partial_bodies(port: int, count: int, ca_file: str, stop: Any, ready: Any) -> dict[str, Any]:
    return _stalled_bodies(port, count, ca_file, stop, ready, declared=BIG_BODY_BYTES, first=BIG_BODY_BYTES // 2)


# An attack's parts, by name: (part, share of the attack's count). The count is the first part's;
# the others are in proportion (the mixed attack: 500 one-byte, 100 dribblers, 100 stalled bodies,
# 1,000 silent).
PARTS: dict[str, list[tuple[str, float]]] = {
    "one-byte": [("one-byte", 1.0)],
    "dribble": [("dribble", 1.0)],
    "silent": [("silent", 1.0)],
    "big-bodies": [("big-bodies", 1.0)],
    "stalled-bodies": [("stalled-bodies", 1.0)],
    "stalled-bodies-client-auth": [("stalled-bodies", 1.0)],
    "mixed": [("one-byte", 1.0), ("dribble", 0.2), ("stalled-bodies", 0.2), ("silent", 2.0)],
    "big-and-partial-bodies": [("big-bodies", 1.0), ("partial-bodies", 12.5)],
}


def _run_part(part: str, count: int, port: int, ca_file: str, body: bytes, stop: Any, ready: Any) -> dict[str, Any]:
    if part == "one-byte":
        return _stallers(port, count, b"\x16", stop, ready)
    if part == "silent":
        return _stallers(port, count, b"", stop, ready)
    if part == "dribble":
        return _dribblers(port, count, ca_file, stop, ready)
    if part == "stalled-bodies":
        return _stalled_bodies(port, count, ca_file, stop, ready)
    if part == "partial-bodies":
        return _partial_bodies(port, count, ca_file, stop, ready)
    return _big_bodies(port, count, ca_file, body, stop, ready)


def attack_process(name: str, count: int, port: int, ca_file: str, body: bytes, stop: Any, ready: Any,
                   results: Any) -> None:
    """Run attack ``name`` (its parts at once, each in a thread) until ``stop``; put its numbers
    in ``results``."""
    parts = [(part, max(1, round(count * share))) for part, share in PARTS[name]]
    _raise_open_files(sum(n for _, n in parts) + 1024)
    stats: dict[str, Any] = {}
    readies = [threading.Event() for _ in parts]

    def run(index: int, part: str, size: int) -> None:
        found = _run_part(part, size, port, ca_file, body, stop, readies[index])
        readies[index].set()
        prefix = f"{part}: " if len(parts) > 1 else ""
        stats.update({prefix + key: value for key, value in found.items()})

    threads = [threading.Thread(target=run, args=(i, part, size), daemon=True) for i, (part, size) in enumerate(parts)]
    for thread in threads:
        thread.start()
    for event in readies:
        event.wait(120)
    ready.set()
    for thread in threads:
        thread.join()
    results.put(stats)
