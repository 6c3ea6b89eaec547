"""Request bodies against the real server (gunicorn, TLS, one worker with four threads): a request
reaches a thread only once its body has fully arrived, so clients that send a whole head and then
trickle or stall their body hold no thread, and the health port answers whatever the TLS port is
doing; a body over the limit is refused from its head; bodies that stall half-way hold room in the
body budget only until a body that arrives needs it.

With the worker as it was before (a request handed to a thread as soon as its head was in), the
first test fails: eight trickled bodies held every thread, and /healthz on the health port timed
out with the rest."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.builders import admission_review, mpijob
from testing.tls_server import TlsServer, serving
from tests.webhook.test_body_memory_e2e import big_review, memory_mib, worker_pid
from tests.webhook.test_hostile_connections import (PROMPT, THREADS, KeptAlive, assert_served_promptly, connect,
                                                    health_port_seconds, read_until_closed)
from webhook.review import TOO_LARGE

CLIENT_TIMEOUT = 4.0
MiB = 1024 * 1024
BUDGET_MIB = 56
HEAD = b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    with serving(tmp_path_factory.mktemp("stalled-bodies"), "--dev", "--workers", "1", "--threads", str(THREADS),
                 "--client-timeout", str(CLIENT_TIMEOUT), "--no-audit-log",
                 "--body-memory", str(BUDGET_MIB)) as running:
        yield running


def tls(server: TlsServer):  # type: ignore[no-untyped-def]
    return server.ssl_context().wrap_socket(connect(server), server_hostname="localhost")


class Tricklers:
    """Connections that sent ``first`` and then send one byte every ``every`` seconds."""

    def __init__(self, sockets: list, every: float = 0.2) -> None:  # type: ignore[type-arg]
        self.sockets, self.every, self.stop = sockets, every, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            for sock in self.sockets:
                try:
                    sock.sendall(b" ")
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for sock in self.sockets:
            sock.close()


def test_clients_trickling_their_body_hold_no_thread(server: TlsServer):
    kept_alive = KeptAlive(server)
    kept_alive.validate_seconds()
    sockets = []
    for _ in range(8 * THREADS):
        sock = tls(server)
        sock.sendall(HEAD + b"Content-Length: 4096\r\n\r\n{")
        sockets.append(sock)
    tricklers = Tricklers(sockets)
    try:
        time.sleep(0.3)
        assert_served_promptly(server, kept_alive)
    finally:
        tricklers.close()
        kept_alive.close()


def test_the_health_port_answers_while_every_request_thread_is_busy(server: TlsServer):
    """More ordinary reviews at once than there are threads, without a pause: /healthz is answered
    from the health port's own threads, not after them."""
    stop = threading.Event()
    review = json.dumps(admission_review(mpijob())).encode()
    answered = []

    def flood() -> None:
        client = http.client.HTTPSConnection("localhost", server.port, context=server.ssl_context(), timeout=30)
        while not stop.is_set():
            client.request("POST", "/validate", body=review, headers={"Content-Type": "application/json"})
            answered.append(client.getresponse().read())
        client.close()

    flooders = [threading.Thread(target=flood, daemon=True) for _ in range(4 * THREADS)]
    for flooder in flooders:
        flooder.start()
    try:
        time.sleep(0.5)
        assert max(health_port_seconds(server) for _ in range(5)) < PROMPT
        assert max(health_port_seconds(server, "/readyz") for _ in range(3)) < PROMPT
    finally:
        stop.set()
        for flooder in flooders:
            flooder.join()
    assert answered


def test_a_body_declared_over_the_limit_is_refused_from_its_head(server: TlsServer):
    sock = tls(server)
    try:
        started = time.monotonic()
        sock.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % (7 * MiB + 1))  # and not a byte of it
        status_line, _, rest = read_until_closed(sock).partition(b"\r\n")
        assert time.monotonic() - started < PROMPT
        assert status_line == b"HTTP/1.1 413 Content Too Large"
        assert rest.endswith(b'"code":413,"reason":"RequestEntityTooLarge","message":%s}' % json.dumps(TOO_LARGE).encode())
    finally:
        sock.close()


def test_a_chunked_body_over_the_limit_is_refused_as_it_arrives(server: TlsServer):
    sock = tls(server)
    try:
        sock.sendall(HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        piece = b"%x\r\n%s\r\n" % (MiB, b" " * MiB)
        try:
            for _ in range(8):
                sock.sendall(piece)
        except OSError:
            pass  # refused before all of it was sent
        status_line, _, rest = read_until_closed(sock).partition(b"\r\n")
        assert status_line == b"HTTP/1.1 413 Content Too Large"
        assert json.dumps(TOO_LARGE).encode() in rest
    finally:
        sock.close()


def test_a_client_that_expects_100_continue_gets_it_before_it_sends_its_body(server: TlsServer):
    review = json.dumps(admission_review(mpijob())).encode()
    sock = tls(server)
    try:
        sock.sendall(HEAD + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(review))
        sock.settimeout(PROMPT)
        assert sock.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.settimeout(10)
        sock.sendall(review)
        answer = b""
        while b'"allowed"' not in answer:
            answer += sock.recv(65536)
        assert b"HTTP/1.1 200 OK" in answer and b'"allowed":true' in answer
    finally:
        sock.close()


def test_bodies_stalled_half_way_hold_room_only_until_a_body_that_arrives_needs_it(server: TlsServer):
    """Forty 7 MiB bodies sent 2 MiB in and stalled want 80 MiB, more than the whole budget (56):
    the worker reads only what its budget holds room for, and a valid near-maximum review sent
    meanwhile is answered (the stalled ones that held its room are cut, 408)."""
    pid = worker_pid(server)
    before = memory_mib(pid, "VmRSS")
    big = big_review()
    stalled = []
    try:
        for _ in range(40):
            sock = tls(server)
            sock.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % (7 * MiB - 4096))
            sock.setblocking(False)
            try:
                sock.send(b" " * (2 * MiB))
            except (BlockingIOError, OSError):
                pass
            stalled.append(sock)
        time.sleep(0.5)
        connection = http.client.HTTPSConnection("localhost", server.port, context=server.ssl_context(), timeout=30)
        try:
            connection.request("POST", "/validate", body=big, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = json.loads(response.read())
        finally:
            connection.close()
        assert response.status == 200, answer
        assert answer["response"]["allowed"] is True
        assert max(health_port_seconds(server) for _ in range(3)) < PROMPT
        peak = memory_mib(pid, "VmHWM")
        # The budget, and what it does not count (the allocator's slack, TLS buffers).
        assert peak - before < BUDGET_MIB + 24, f"{before:.0f} MiB before, {peak:.0f} MiB at the peak"
    finally:
        for sock in stalled:
            sock.close()
    assert dropped(server, "body_stalled") > 0


def dropped(server: TlsServer, reason: str) -> float:
    status, text = server.health_request("/metrics")
    assert status == 200
    for line in text.decode().splitlines():
        if line.startswith('mpijob_webhook_dropped_connections_total{reason="%s"}' % reason):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_body_cut_short_by_its_client_is_a_400_from_the_loop(server: TlsServer):
    sock = socket.create_connection(("127.0.0.1", server.health_port), timeout=10)
    try:
        sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        sock.shutdown(socket.SHUT_WR)  # and nothing more: the client is done
        status_line, _, rest = read_until_closed(sock).partition(b"\r\n")
        assert status_line == b"HTTP/1.1 400 Bad Request"
        assert rest.endswith(b'"message":"request body ended before the 1000 bytes its Content-Length announced: '
                             b'the client stopped sending"}')
    finally:
        sock.close()
