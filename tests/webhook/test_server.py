"""The gunicorn configuration `serve` runs with, read back from gunicorn's own Config."""
from __future__ import annotations

import gc
import re
import ssl
from pathlib import Path

import pytest
from gunicorn.workers.gthread import ThreadWorker

from certs import authority
from webhook.bootstrap import ServeOptions
from webhook.cli import build_parser, main
from webhook.commands.serve import serve_options
from webhook.connections import BoundedClientSocket, EventLoopWorker
from webhook.server import WebhookServer, gunicorn_options


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory):
    bundle = authority.dev_bundle(tmp_path_factory.mktemp("server-config"))
    options = ServeOptions(host="::", port=9443, cert_file=bundle.cert_file, key_file=bundle.key_file,
                           workers=3, threads=5, client_timeout=4.5, max_pending_connections=77)
    return WebhookServer(lambda: None, gunicorn_options(options)).cfg


def test_tls_threaded_workers_on_the_given_address_and_a_plain_health_port(config):
    assert config.bind == ["[::]:9443", "[::]:8081"]
    assert config.worker_class.plain_ports == frozenset({8081})
    assert config.is_ssl
    assert (config.workers, config.threads) == (3, 5)
    assert issubclass(config.worker_class, ThreadWorker)
    assert config.http_protocols == ["h1"]  # HTTP/2 would hold a thread per connection


def test_slow_and_idle_clients_are_bounded_by_the_client_timeout(config):
    assert config.worker_class.client_seconds == 4.5
    assert config.worker_class.max_pending == 77
    assert issubclass(config.worker_class, EventLoopWorker)
    context = config.ssl_context(config, lambda: ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    assert issubclass(context.sslsocket_class, BoundedClientSocket)
    assert context.sslsocket_class.request_seconds == 4.5


def test_nothing_is_written_outside_a_tmpfs(config):
    assert config.control_socket_disable is True  # gunicornc's socket would need a writable $HOME
    assert config.worker_tmp_dir == ("/dev/shm" if Path("/dev/shm").is_dir() else None)


def test_keep_alive_outlasts_the_api_servers_idle_connections(config):
    assert config.keepalive > 90  # Go's http.Transport closes idle connections after 90 s


@pytest.mark.parametrize(("flags", "error"), [
    (["--client-timeout", "0"], "--client-timeout must be a positive number of seconds"),
    (["--threads", "0"], "--workers and --threads must be at least 1"),
    (["--cert-file", "tls.crt"], "--cert-file needs --key-file"),
    (["--health-port", "8443"], "--health-port must be a port number other than --port"),
    (["--health-port", "0"], "--health-port must be a port number other than --port"),
    (["--max-pending-connections", "0"], "--max-pending-connections must be at least 1"),
    (["--client-name", "kube-apiserver"], "--client-name and --client-auth-endpoint need --client-ca-file"),
    (["--cluster-stale-after", "0"], "--cluster-stale-after and --crd-recheck-interval must be positive"),
    (["--crd-recheck-interval", "-1"], "--cluster-stale-after and --crd-recheck-interval must be positive"),
])
def test_serve_refuses_unusable_flags(flags: list[str], error: str, capsys: pytest.CaptureFixture[str]):
    tls = [] if "--cert-file" in flags else ["--dev"]
    with pytest.raises(SystemExit) as exited:
        main(["serve", *tls, *flags])
    assert exited.value.code == 2
    assert error in capsys.readouterr().err


def test_a_worker_freezes_what_it_loaded_out_of_full_collections(tmp_path: Path):
    """Modules and the app live as long as the worker: full collections must not walk them."""
    bundle = authority.dev_bundle(tmp_path)
    options = ServeOptions(port=9443, cert_file=bundle.cert_file, key_file=bundle.key_file)
    loaded = {"app": [object()]}
    server = WebhookServer(lambda: loaded, gunicorn_options(options))
    assert gc.get_freeze_count() == 0
    try:
        assert server.load() is loaded
        assert gc.get_freeze_count() > 0
        assert not any(o is loaded for o in gc.get_objects())  # frozen: no longer tracked
    finally:
        gc.unfreeze()


def test_the_cluster_timing_flags_reach_the_caches():
    args = build_parser().parse_args(["serve", "--dev", "--cluster-stale-after", "7", "--crd-recheck-interval", "3"])
    timing = serve_options(args).cluster_timing
    assert (timing.stale_after, timing.absent_recheck) == (7.0, 3.0)
    defaults = serve_options(build_parser().parse_args(["serve", "--dev"])).cluster_timing
    assert (defaults.stale_after, defaults.absent_recheck) == (30.0, 60.0)


def test_the_start_up_log_says_which_port_is_tls_and_which_plain(dev_server):
    """gunicorn's own line named both ports https://; the health port is plain HTTP."""
    said = [line.split("] ", 3)[-1] for line in dev_server.output().splitlines() if "Listening at: " in line]
    assert said == [f"Listening at: webhook HTTPS on https://127.0.0.1:{dev_server.port}, health and metrics plain "
                    f"HTTP on http://127.0.0.1:{dev_server.health_port} ({dev_server.process.pid})"]
    assert dev_server.health_request("/healthz")[0] == 200  # what the line says: plain HTTP there


def test_ci_tests_the_lowest_gunicorn_the_project_allows():
    """pyproject's range for gunicorn, and the release .ci/run tests the connection tests against
    at its low end (the whole suite runs against the newest), stay the same."""
    root = Path(__file__).resolve().parents[2]
    [lower] = re.findall(r'"gunicorn>=([0-9.]+),<[0-9.]+"', (root / "pyproject.toml").read_text())
    [oldest] = re.findall(r"^GUNICORN_OLDEST=([0-9.]+)$", (root / ".ci/run").read_text(), re.MULTILINE)
    assert tuple(map(int, oldest.split("."))) == tuple(map(int, lower.split(".")))[:3] + (0,) * (3 - len(lower.split(".")))
