"""The watched policy file: valid, invalid and deleted edits, the ConfigMap symlink swap, the
start-up check, and the watcher thread."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from policies.interface import Action
from policies.config import PolicyError
from policies.registry import RULE_IDS
from webhook import policy_reload
from webhook.policy_reload import PolicySource
from tests.webhook.configmap_volume import ConfigMapVolume

WARN = "rules:\n  slots-per-worker: warn\n"
AUDIT = "rules:\n  slots-per-worker: audit\n"
TYPO = "rules:\n  slot-per-worker: warn\n"


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, result: str, **details: float) -> None:
        self.calls.append((result, details))

    @property
    def results(self) -> list[str]:
        return [result for result, _ in self.calls]


def slots_action(source: PolicySource) -> Action:
    settings = source.current().settings_for("team-a")
    assert settings is not None
    return settings.rules["slots-per-worker"].action


@pytest.fixture
def volume(tmp_path: Path) -> ConfigMapVolume:
    volume = ConfigMapVolume(tmp_path / "policy")
    volume.write(WARN)
    return volume


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def source(volume: ConfigMapVolume, recorder: Recorder) -> PolicySource:
    return PolicySource(volume.path, record=recorder, namespace="mpijob-webhook")


def test_the_file_is_loaded_at_start(source, recorder, volume):
    assert slots_action(source) is Action.WARN
    assert recorder.results == ["success"]
    assert recorder.calls[0][1]["loaded_at"] == pytest.approx(time.time(), abs=5)
    ready, detail = source.status()
    assert ready
    assert detail.startswith("serving the policy loaded at ")
    assert detail.endswith(f"from {volume.path}")


def test_a_configmap_update_swapping_the_data_symlink_is_picked_up(source, recorder, volume):
    volume.write(AUDIT)
    assert source.refresh() == "success"
    assert slots_action(source) is Action.AUDIT
    assert recorder.results == ["success", "success"]


def test_an_unchanged_file_is_not_read_again(source, recorder):
    assert source.refresh() is None
    assert source.refresh() is None
    assert recorder.results == ["success"]


def test_the_same_content_written_again_is_not_a_reload(source, recorder, volume):
    volume.write(WARN)  # new inode, same bytes: e.g. an unrelated key of the ConfigMap changed
    assert source.refresh() is None
    assert recorder.results == ["success"]


def test_an_invalid_edit_keeps_the_last_good_policy_and_says_where(source, recorder, volume, caplog):
    before = source.current()
    volume.write(TYPO)
    with caplog.at_level(logging.ERROR, logger="webhook.policy_reload"):
        assert source.refresh() == "invalid"
    assert source.current() is before
    assert recorder.results == ["success", "invalid"]
    [logged] = caplog.messages
    assert logged.startswith(f"{volume.path} is invalid (1 problem):\n  line 2: rules.slot-per-worker: "
                             "unknown rule id 'slot-per-worker'; did you mean slots-per-worker?")
    assert "\nThe policy loaded at " in logged and logged.endswith("stays in force; fix the file, it is re-read within 2 s")
    ready, detail = source.status()
    assert ready  # a typo must not take the webhook out of service
    assert "the policy file is invalid and was not applied: " in detail
    assert f"{volume.path}: line 2: rules.slot-per-worker: unknown rule id 'slot-per-worker'; " \
           "did you mean slots-per-worker?" in detail
    assert source.refresh() is None  # reported once, not on every check
    assert recorder.results == ["success", "invalid"]


def test_fixing_the_file_clears_the_error(source, recorder, volume, caplog):
    volume.write(TYPO)
    source.refresh()
    volume.write(AUDIT)
    with caplog.at_level(logging.INFO, logger="webhook.policy_reload"):
        assert source.refresh() == "success"
    assert slots_action(source) is Action.AUDIT
    assert caplog.messages[-1].endswith("; the earlier problem is resolved")
    assert "invalid" not in source.status()[1]


def test_reverting_to_the_content_in_force_clears_the_error(source, recorder, volume):
    volume.write(TYPO)
    source.refresh()
    volume.write(WARN)
    assert source.refresh() == "success"
    assert recorder.results == ["success", "invalid", "success"]
    assert "invalid" not in source.status()[1]


def test_a_deleted_file_keeps_the_last_good_policy_until_it_is_back(source, recorder, volume, caplog):
    before = source.current()
    volume.remove_key()
    with caplog.at_level(logging.WARNING, logger="webhook.policy_reload"):
        assert source.refresh() == "missing"
    assert source.current() is before
    assert caplog.messages[0].startswith(f"policy file {volume.path} is gone; the policy loaded at ")
    assert caplog.messages[0].endswith("stays in force until the file is back")
    ready, detail = source.status()
    assert ready
    assert detail.startswith(f"policy file {volume.path} is missing; the policy loaded at ")
    assert source.refresh() is None
    volume.write(AUDIT)
    assert source.refresh() == "success"
    assert slots_action(source) is Action.AUDIT
    assert recorder.results == ["success", "missing", "success"]


def test_a_plain_file_edited_in_place_is_picked_up(tmp_path, recorder):
    path = tmp_path / "policy.yaml"
    path.write_text(WARN)
    source = PolicySource(path, record=recorder)
    stat = path.stat()
    path.write_text(AUDIT)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # same-tick writes still differ
    assert source.refresh() == "success"
    assert slots_action(source) is Action.AUDIT


def test_an_invalid_file_without_a_fallback_is_refused(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(TYPO)
    with pytest.raises(PolicyError) as caught:
        PolicySource(path)
    assert str(caught.value) == (f"{path} is invalid (1 problem):\n  line 2: rules.slot-per-worker: unknown rule id "
                                 f"'slot-per-worker'; did you mean slots-per-worker? (known rules: "
                                 f"{', '.join(RULE_IDS)})")


def test_a_missing_file_without_a_fallback_is_refused(tmp_path):
    with pytest.raises(PolicyError) as caught:
        PolicySource(tmp_path / "absent.yaml")
    assert str(caught.value) == f"{tmp_path / 'absent.yaml'}: cannot be read: No such file or directory"


def test_load_at_startup_refuses_an_invalid_or_missing_file(tmp_path):
    path = tmp_path / "policy.yaml"
    with pytest.raises(PolicyError) as caught:
        policy_reload.load_at_startup(path)
    assert str(caught.value) == f"{path}: cannot be read: No such file or directory"
    path.write_bytes(b"rules: {slots-per-worker: \xff}\n")
    with pytest.raises(PolicyError, match=r"is not UTF-8 text \(byte 26\)"):
        policy_reload.load_at_startup(path)


def test_a_worker_started_while_the_file_is_invalid_serves_the_start_up_policy(tmp_path, recorder):
    path = tmp_path / "policy.yaml"
    path.write_text(AUDIT)
    started_with = policy_reload.load_at_startup(path)
    path.write_text(TYPO)  # broken after serve checked it, before this worker read it
    source = PolicySource(path, fallback=started_with, record=recorder)
    assert source.current() is started_with
    assert recorder.results == ["invalid"]
    ready, detail = source.status()
    assert ready
    assert detail.startswith("serving the policy the server started with; the policy file is invalid")


def test_requests_never_touch_the_filesystem(source, monkeypatch):
    def no_io(*args, **kwargs):
        raise AssertionError("current() must not stat or read the policy file")

    monkeypatch.setattr(os, "stat", no_io)
    monkeypatch.setattr(Path, "read_bytes", no_io)
    assert slots_action(source) is Action.WARN


def test_the_watcher_thread_picks_up_an_update_within_its_interval(volume, recorder):
    source = PolicySource(volume.path, check_seconds=0.05, record=recorder).start()
    try:
        volume.write(AUDIT)
        deadline = time.monotonic() + 5
        while slots_action(source) is not Action.AUDIT and time.monotonic() < deadline:
            time.sleep(0.01)
        assert slots_action(source) is Action.AUDIT
    finally:
        source.stop()
    assert source._thread is None


def test_a_failing_metrics_hook_does_not_stop_a_reload(volume, caplog):
    def broken(result, **details):
        raise RuntimeError("metrics down")

    with caplog.at_level(logging.ERROR, logger="webhook.policy_reload"):
        source = PolicySource(volume.path, record=broken)
    assert slots_action(source) is Action.WARN
    assert caplog.messages == ["recording the policy reload failed"]


def test_the_webhooks_own_namespace_comes_from_the_downward_api(monkeypatch, tmp_path):
    monkeypatch.setenv("POD_NAMESPACE", "mpi-admission")
    assert policy_reload.own_namespace() == "mpi-admission"
    monkeypatch.delenv("POD_NAMESPACE")
    account = tmp_path / "namespace"
    account.write_text("from-service-account\n")
    monkeypatch.setattr(policy_reload, "SERVICE_ACCOUNT_NAMESPACE", account)
    assert policy_reload.own_namespace() == "from-service-account"
    monkeypatch.setattr(policy_reload, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    assert policy_reload.own_namespace() == "mpijob-webhook"
