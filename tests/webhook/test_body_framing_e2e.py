"""End to end over real TLS sockets: a chunked body whose framing is broken (chunk size, chunk
terminator, trailer) is the client's mistake, answered with a 400 and a reason, never a 500."""
from __future__ import annotations

import json
import socket
import ssl

import pytest

from testing.builders import admission_review, mpijob
from testing.tls_server import TlsServer

REVIEW = json.dumps(admission_review(mpijob())).encode()
HEAD = (b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def exchange(server: TlsServer, raw: bytes) -> tuple[int, dict]:
    """Send ``raw`` on a fresh TLS connection; the status and JSON body of the first answer."""
    context = server.ssl_context()
    with socket.create_connection(("localhost", server.port), timeout=10) as plain, \
            context.wrap_socket(plain, server_hostname="localhost") as sock:
        sock.sendall(raw)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
            try:
                data = sock.recv(65536)
            except (ssl.SSLError, ConnectionResetError):
                break
            if not data:
                break
            answer += data
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), answer[:200]
    return int(head.split()[1]), json.loads(body[:_length(answer)])


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 1 << 30


def test_a_well_formed_chunked_review_is_answered(dev_server: TlsServer):
    status, answer = exchange(dev_server, HEAD + chunk(REVIEW[:100]) + chunk(REVIEW[100:]) + b"0\r\n\r\n")
    assert status == 200
    assert answer["response"]["allowed"] is True


@pytest.mark.parametrize(("framing", "reason"), [
    (b"zz\r\n" + REVIEW + b"\r\n0\r\n\r\n", "Invalid chunk size: b'zz'"),
    (b"-5\r\n" + REVIEW[:5] + b"\r\n0\r\n\r\n", "Invalid chunk size: b'-5'"),
    (b"%x\r\n%sXX0\r\n\r\n" % (len(REVIEW), REVIEW), "Invalid chunk terminator is not '\\r\\n': b'XX'"),
    (chunk(REVIEW) + b"0\r\nbad trailer line\r\n\r\n", "Invalid HTTP Header: 'bad trailer line'"),
    (chunk(REVIEW) + b"0\r\nX-Trailer : value\r\n\r\n", "Invalid HTTP header name: 'X-Trailer '"),
    (chunk(REVIEW) + b"0\r\nX-Trailer: value\n\r\n", "bare LF as line terminator"),
    (b"5;\x01ext\r\nhello\r\n0\r\n\r\n", "Invalid chunk extension"),
], ids=["size-zz", "size-negative", "missing-crlf", "trailer-no-colon", "trailer-space-before-colon",
        "trailer-bare-lf", "bad-extension"])
def test_broken_chunked_framing_is_a_400_with_the_reason(dev_server: TlsServer, framing: bytes, reason: str):
    status, answer = exchange(dev_server, HEAD + framing)
    assert status == 400, answer
    assert answer["kind"] == "Status" and answer["code"] == 400 and answer["reason"] == "BadRequest"
    assert answer["message"].startswith("request body could not be read: its chunked framing is invalid"), answer
    assert reason in answer["message"], answer


def test_the_server_serves_on_after_broken_framing(dev_server: TlsServer):
    exchange(dev_server, HEAD + b"zz\r\n")
    assert dev_server.review("/validate", admission_review(mpijob()))["allowed"] is True
