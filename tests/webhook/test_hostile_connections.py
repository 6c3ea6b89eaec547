"""Connection-level attacks against the real server (gunicorn, TLS, one worker with four threads),
in numbers far above the thread pool: a connection that has not completed its TLS handshake and
its request head costs no thread, pending connections are bounded on their own (never against
what established connections need), and the connection count stays exact.

With gunicorn's gthread worker as it was customised before, the first three fail: a stalled
handshake or a trickled head holds a thread until the client timeout, and silent connections
count against ``worker_connections`` until accepting stops."""
from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.builders import admission_review, mpijob
from testing.tls_server import TlsServer, serving

CLIENT_TIMEOUT = 3.0
THREADS = 4
PROMPT = 1.0  # a good request's answer while the attack goes on (before the fix: the client timeout)
MAX_PENDING = 64


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    with serving(tmp_path_factory.mktemp("hostile-connections"), "--dev", "--workers", "1",
                 "--threads", str(THREADS), "--client-timeout", str(CLIENT_TIMEOUT),
                 "--max-pending-connections", str(MAX_PENDING)) as running:
        yield running


def connect(server: TlsServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def healthz_seconds(server: TlsServer) -> float:
    started = time.monotonic()
    assert server.request("GET", "/healthz") == (200, b'{"status":"ok"}')
    return time.monotonic() - started


def health_port_seconds(server: TlsServer, path: str = "/healthz") -> float:
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", server.health_port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        assert response.status == 200, response.read()
        response.read()
    finally:
        connection.close()
    return time.monotonic() - started


class KeptAlive:
    """A /validate client on one kept-alive connection, as the API server's."""

    def __init__(self, server: TlsServer) -> None:
        self.connection = http.client.HTTPSConnection("localhost", server.port, context=server.ssl_context(),
                                                      timeout=10)
        self.review = json.dumps(admission_review(mpijob())).encode()

    def validate_seconds(self) -> float:
        started = time.monotonic()
        self.connection.request("POST", "/validate", body=self.review, headers={"Content-Type": "application/json"})
        response = self.connection.getresponse()
        answer = json.loads(response.read())
        assert response.status == 200 and answer["response"]["allowed"] is True, answer
        return time.monotonic() - started

    def close(self) -> None:
        self.connection.close()


def assert_served_promptly(server: TlsServer, kept_alive: KeptAlive) -> None:
    assert max(healthz_seconds(server) for _ in range(3)) < PROMPT
    assert max(kept_alive.validate_seconds() for _ in range(3)) < PROMPT
    assert max(health_port_seconds(server) for _ in range(3)) < PROMPT


def test_connections_that_sent_one_byte_hold_no_thread(server: TlsServer):
    kept_alive = KeptAlive(server)
    kept_alive.validate_seconds()  # connected before the attack, as the API server's would be
    stalled = []
    try:
        for _ in range(8 * THREADS):
            sock = connect(server)
            sock.sendall(b"\x16")  # the first byte of a TLS record, and nothing more
            stalled.append(sock)
        time.sleep(0.2)
        assert_served_promptly(server, kept_alive)
    finally:
        kept_alive.close()
        for sock in stalled:
            sock.close()


def test_clients_trickling_their_request_head_hold_no_thread(server: TlsServer):
    kept_alive = KeptAlive(server)
    kept_alive.validate_seconds()
    stop = threading.Event()
    trickling = []
    for _ in range(4 * THREADS):
        sock = server.ssl_context().wrap_socket(connect(server), server_hostname="localhost")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        trickling.append(sock)

    def trickle() -> None:
        while not stop.wait(0.2):
            for sock in trickling:
                try:
                    sock.sendall(b"x")
                except OSError:
                    pass

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        time.sleep(0.3)
        assert_served_promptly(server, kept_alive)
    finally:
        stop.set()
        sender.join()
        kept_alive.close()
        for sock in trickling:
            sock.close()


def closed_by_server(sock: socket.socket, within: float) -> bool:
    poll = select.poll()  # select() cannot wait for descriptors above 1023
    poll.register(sock, select.POLLIN)
    if not poll.poll(within * 1000):
        return False
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


def test_silent_connections_past_the_pending_bound_evict_the_oldest_and_never_stop_accepting(server: TlsServer):
    kept_alive = KeptAlive(server)
    kept_alive.validate_seconds()
    # Far past the pending bound and past gunicorn's own worker_connections (1000).
    silent = [connect(server) for _ in range(1100)]
    try:
        time.sleep(0.3)
        assert_served_promptly(server, kept_alive)
        # The oldest were closed to make room: the newest MAX_PENDING stay until their deadline.
        assert all(closed_by_server(sock, 2.0) for sock in silent[:100])
        assert not any(closed_by_server(sock, 0) for sock in silent[-MAX_PENDING // 2:])
        # The scrape's own connection made room for itself too, then became established.
        assert_connection_counts(server, established=2, pending=MAX_PENDING - 1)
    finally:
        kept_alive.close()
        for sock in silent:
            sock.close()


def connection_counts(server: TlsServer) -> dict[str, float]:
    connection = http.client.HTTPConnection("127.0.0.1", server.health_port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    counts = {}
    for line in text.splitlines():
        if line.startswith("mpijob_webhook_connections{"):
            labels, value = line.rsplit(" ", 1)
            counts[labels.split('state="')[1].split('"')[0]] = float(value)
    return counts


def assert_connection_counts(server: TlsServer, *, established: int, pending: int) -> None:
    """``established`` counts the connection asking, too."""
    deadline = time.monotonic() + CLIENT_TIMEOUT + 3
    while True:  # connections the client closed are noticed by the server a moment later
        counts = connection_counts(server)
        if counts == {"established": established, "pending": pending} or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert counts == {"established": established, "pending": pending}


def test_the_connection_count_stays_exact_whatever_ends_a_handshake(server: TlsServer):
    for round_ in range(40):
        sock = connect(server)
        if round_ % 4 == 0:
            sock.sendall(b"\x16\x03\x01\x00\x05hello")  # a TLS record that is no ClientHello
        elif round_ % 4 == 1:
            sock.sendall(b"GET / HTTP/1.1\r\n\r\n")  # plain HTTP on the TLS port
        elif round_ % 4 == 2:  # a handshake the client gives up half-way
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
            obj = tls.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO())
            with pytest.raises(ssl.SSLWantReadError):
                obj.do_handshake()
            sock.sendall(outgoing.read())
        else:  # a client that does not trust the certificate and aborts
            with pytest.raises(ssl.SSLError):
                ssl.create_default_context().wrap_socket(sock, server_hostname="localhost")
        sock.close()
    assert_connection_counts(server, established=1, pending=0)
    assert healthz_seconds(server) < PROMPT
    assert_connection_counts(server, established=1, pending=0)


def test_requests_with_large_bodies_cannot_take_every_thread(server: TlsServer):
    """Bodies over a MiB go to a quarter of the threads: clients sending (here: stalling) maximum-size
    reviews leave the other threads to probes and ordinary reviews."""
    kept_alive = KeptAlive(server)
    kept_alive.validate_seconds()
    large = []
    try:
        for _ in range(2 * THREADS):
            sock = server.ssl_context().wrap_socket(connect(server), server_hostname="localhost")
            sock.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 7000000\r\n\r\n" + b"{" + b" " * 65536)
            large.append(sock)
        time.sleep(0.3)
        assert_served_promptly(server, kept_alive)
    finally:
        kept_alive.close()
        for sock in large:
            sock.close()


def read_until_closed(sock: socket.socket) -> bytes:
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except OSError:
        pass
    return answer


def test_a_request_head_over_64_kib_is_refused_with_431_before_any_thread_sees_it(server: TlsServer):
    sock = server.ssl_context().wrap_socket(connect(server), server_hostname="localhost")
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n" + b"X-Filler: " + b"a" * (70 * 1024))
        status_line, _, rest = read_until_closed(sock).partition(b"\r\n")
        assert status_line == b"HTTP/1.1 431 Request Header Fields Too Large"
        assert rest.endswith(b'"reason":"RequestHeaderFieldsTooLarge","message":"request head longer than 65536 bytes"}')
    finally:
        sock.close()


def test_a_head_ended_by_bare_line_feeds_gets_an_answer_not_the_deadline(server: TlsServer):
    sock = server.ssl_context().wrap_socket(connect(server), server_hostname="localhost")
    try:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\nHost: localhost\n\n")
        answer = read_until_closed(sock)
        assert answer.startswith(b"HTTP/1.1 400 ")
        assert time.monotonic() - started < PROMPT
    finally:
        sock.close()
