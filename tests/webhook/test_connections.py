"""Slow and idle clients against the real server (gunicorn, TLS, one worker with four threads):
none of them delays anyone else's request, and none is held longer than its deadline.

With gunicorn 27's own gthread worker each of these tests fails: an idle connection holds a
thread for five seconds, a stalled handshake or trickled header holds one for good, and a client
that never closes after ``Connection: close`` stalls the worker's main loop for two seconds."""
from __future__ import annotations

import http.client
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.tls_server import TlsServer, serving
from webhook.connections import ANSWER_GRACE

CLIENT_TIMEOUT = 1.0
THREADS = 4
# How late a cut may come: the deadline, the poller's one-second tick, a loaded test machine.
SLACK = 2.5
PROMPT = 1.0  # a good request's answer, while the slow clients are busy (gunicorn alone: 5 s or never)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    with serving(tmp_path_factory.mktemp("slow-clients"), "--dev", "--workers", "1", "--threads", str(THREADS),
                 "--client-timeout", str(CLIENT_TIMEOUT)) as running:
        yield running


def good_request_seconds(server: TlsServer) -> float:
    started = time.monotonic()
    assert server.request("GET", "/healthz") == (200, b'{"status":"ok"}')
    return time.monotonic() - started


def connect(server: TlsServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def connect_tls(server: TlsServer) -> ssl.SSLSocket:
    return server.ssl_context().wrap_socket(connect(server), server_hostname="localhost")


def closed_by_server(sock: socket.socket, started: float, limit: float) -> float | None:
    """Seconds from ``started`` until the server closed ``sock`` (None: still open at ``limit``)."""
    while (remaining := started + limit - time.monotonic()) > 0:
        readable, _, _ = select.select([sock], [], [], remaining)
        if not readable:
            continue
        try:
            if not sock.recv(4096):
                return time.monotonic() - started
        except (ConnectionError, ssl.SSLError, OSError):
            return time.monotonic() - started
    return None


class Trickler(threading.Thread):
    """Sends ``prefix``, then one byte every ``interval`` seconds, until the server hangs up;
    ``response`` holds whatever the server answered first."""

    def __init__(self, sock: socket.socket, prefix: bytes, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.sock, self.prefix, self.interval = sock, prefix, interval
        self.started = time.monotonic()
        self.closed_after: float | None = None
        self.response = b""

    def run(self) -> None:
        try:
            self.sock.sendall(self.prefix)
            while time.monotonic() - self.started < CLIENT_TIMEOUT + SLACK + 2:
                readable, _, _ = select.select([self.sock], [], [], self.interval)
                if readable:
                    data = self.sock.recv(4096)
                    self.response += data
                    if not data:
                        break
                    continue
                self.sock.sendall(b"x")
        except (ConnectionError, ssl.SSLError, OSError):
            pass
        self.closed_after = time.monotonic() - self.started


def assert_cut_at_the_deadline(seconds: float | None) -> None:
    assert seconds is not None, "the server never closed the connection"
    assert CLIENT_TIMEOUT * 0.8 <= seconds <= CLIENT_TIMEOUT + SLACK


def test_idle_connections_hold_no_thread_and_are_closed(server: TlsServer):
    started = time.monotonic()
    idle = [connect(server) for _ in range(2 * THREADS)]
    try:
        assert max(good_request_seconds(server) for _ in range(3)) < PROMPT
        for sock in idle:
            assert_cut_at_the_deadline(closed_by_server(sock, started, CLIENT_TIMEOUT + SLACK + 1))
    finally:
        for sock in idle:
            sock.close()


def test_stalled_handshakes_and_trickled_headers_are_cut_at_the_deadline(server: TlsServer, tmp_path: Path):
    stalled = []
    for _ in range(THREADS - 2):
        sock = connect(server)
        sock.sendall(b"\x16\x03\x01")  # the start of a TLS ClientHello, and nothing more
        stalled.append((time.monotonic(), sock))
    trickler = Trickler(connect_tls(server), b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
    trickler.start()
    try:
        time.sleep(0.2)  # all three hold a thread now; one is left
        assert max(good_request_seconds(server) for _ in range(3)) < PROMPT
        for started, sock in stalled:
            assert_cut_at_the_deadline(closed_by_server(sock, started, CLIENT_TIMEOUT + SLACK + 1))
        trickler.join(CLIENT_TIMEOUT + SLACK + 3)
        # cut although it sent a byte every 0.2 s: one deadline per request, not per read
        assert_cut_at_the_deadline(trickler.closed_after)
        assert trickler.response == b""
    finally:
        for _, sock in stalled:
            sock.close()
        trickler.sock.close()
    assert f"its request did not arrive within {CLIENT_TIMEOUT:g}s" in server.output()


def test_trickled_body_gets_a_408_at_the_deadline(server: TlsServer):
    headers = (b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               b"Content-Length: 100000\r\n\r\n{")
    trickler = Trickler(connect_tls(server), headers)
    trickler.start()
    try:
        assert good_request_seconds(server) < PROMPT
        trickler.join(CLIENT_TIMEOUT + ANSWER_GRACE + SLACK + 3)
        assert_cut_at_the_deadline(trickler.closed_after)
        status_line, _, rest = trickler.response.partition(b"\r\n")
        assert status_line.startswith(b"HTTP/1.1 408 ")
        # answered by the event loop: no thread ever waited for this body
        assert rest.endswith(b'"code":408,"reason":"Timeout","message":"request body did not arrive: '
                             + f'the client did not send its request within {CLIENT_TIMEOUT:g}s"}}'.encode())
    finally:
        trickler.sock.close()


def test_clients_that_never_close_do_not_stall_the_others(server: TlsServer):
    lingering = []
    for _ in range(3):
        sock = connect_tls(server)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        lingering.append(sock)
    try:
        time.sleep(0.1)
        assert max(good_request_seconds(server) for _ in range(3)) < PROMPT
        for sock in lingering:  # each got its answer, then the server closed
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b'{"status":"ok"}')
    finally:
        for sock in lingering:
            sock.close()


def test_a_kept_alive_connection_gets_a_fresh_deadline_for_each_request(server: TlsServer):
    connection = http.client.HTTPSConnection("localhost", server.port, context=server.ssl_context(), timeout=10)
    try:
        for _ in range(3):
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            assert (response.status, response.read()) == (200, b'{"status":"ok"}')
            time.sleep(CLIENT_TIMEOUT * 0.7)  # idle between requests: the keep-alive timeout applies
        assert connection.sock is not None  # one connection for all three
    finally:
        connection.close()


def test_a_kept_alive_connection_trickling_its_next_request_head_is_cut_at_the_deadline(server: TlsServer):
    sock = connect_tls(server)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        answer = b""
        while not answer.endswith(b'{"status":"ok"}'):
            data = sock.recv(4096)
            assert data, answer
            answer += data
        # Established now: the next head waits in the loop under its own deadline, from its first byte.
        trickler = Trickler(sock, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        trickler.start()
        trickler.join()
        assert_cut_at_the_deadline(trickler.closed_after)
        assert trickler.response == b""
    finally:
        sock.close()


def test_pipelined_requests_are_all_answered_in_order(server: TlsServer):
    # Sent in one write, the three heads are read by the loop at once: the second and third wait in
    # the parser's buffer while the first is served, and are served from there.
    request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
    last = b"GET /nowhere HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    sock = connect_tls(server)
    sock.settimeout(5)
    try:
        sock.sendall(request * 2 + last)
        answers = b""
        while data := sock.recv(4096):
            answers += data
    finally:
        sock.close()
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answers)
    assert statuses == [b"200", b"200", b"404"]
    assert answers.count(b'{"status":"ok"}') == 2
