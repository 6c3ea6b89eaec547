"""The last good policy, kept for workers started later: what a worker keeps, what a new worker
falls back on, and how two workers' writes are ordered."""
from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from policies.interface import Action
from webhook import policy_reload
from webhook.last_good_policy import KeptPolicy, LastGoodPolicy
from webhook.policy_reload import PolicySource
from tests.webhook.configmap_volume import ConfigMapVolume
from tests.webhook.test_policy_reload import AUDIT, TYPO, WARN, Recorder, slots_action

DENY = "rules:\n  slots-per-worker: deny\n"


@pytest.fixture
def store(tmp_path: Path) -> LastGoodPolicy:
    directory = tmp_path / "store"
    directory.mkdir()
    return LastGoodPolicy(directory)


def kept(text: str, version: int, digest: str = "d") -> KeptPolicy:
    return KeptPolicy(text.encode(), digest, 1_700_000_000.0 + version, version)


def test_the_newer_version_of_the_file_wins_whatever_the_order_of_the_writes(store):
    assert store.read() is None
    assert store.keep(kept(WARN, 2)) is True
    assert store.keep(kept(AUDIT, 1)) is False  # a worker that read an older version, late
    assert store.read() == kept(WARN, 2)
    assert store.keep(kept(DENY, 3)) is True
    assert store.read() == kept(DENY, 3)


def test_writes_from_many_threads_leave_the_newest_and_no_staged_files(store):
    threads = [threading.Thread(target=store.keep, args=(kept(f"rules: {{}}\n# {n}\n", n),)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.read() == kept("rules: {}\n# 39\n", 39)
    assert sorted(p.name for p in store.directory.iterdir()) == [".lock", "last-good-policy.json"]


def test_an_unreadable_store_is_no_policy_with_a_warning(store, caplog):
    store.file.write_text('{"text": 7}')
    with caplog.at_level(logging.WARNING):
        assert store.read() is None
    assert f"the last good policy kept in {store.file} cannot be read" in caplog.text


def test_a_worker_keeps_what_it_loads_and_a_later_worker_falls_back_on_it(tmp_path, store):
    volume = ConfigMapVolume(tmp_path / "policy")
    volume.write(WARN)
    started_with = policy_reload.load_at_startup(volume.path, store)
    first = PolicySource(volume.path, fallback=started_with, keep=store, namespace="ns")
    volume.write(DENY)
    assert first.refresh() == "success"
    volume.write(TYPO)
    assert first.refresh() == "invalid"

    recorder = Recorder()
    later = PolicySource(volume.path, fallback=started_with, keep=store, namespace="ns", record=recorder)
    assert slots_action(later) is Action.DENY  # not WARN, the start-up policy
    assert recorder.results == ["invalid"]
    ready, detail = later.status()
    digest = first.status()[1].split("sha256 ")[1][:12]
    assert ready
    assert detail.startswith(f"serving the last good policy (loaded at ")
    assert f", sha256 {digest}, before this worker started); the policy file is invalid and was not applied" in detail

    # Fixed: the later worker loads the file itself, as any worker does.
    volume.write(AUDIT)
    assert later.refresh() == "success"
    assert slots_action(later) is Action.AUDIT
    assert later.status()[1].startswith("serving the policy loaded at ")


def test_a_later_worker_reads_an_unchanged_file_itself(tmp_path, store):
    volume = ConfigMapVolume(tmp_path / "policy")
    volume.write(WARN)
    policy_reload.load_at_startup(volume.path, store)
    recorder = Recorder()
    later = PolicySource(volume.path, keep=store, namespace="ns", record=recorder)
    assert recorder.results == ["success"]  # logged and counted as loaded, like every worker
    assert slots_action(later) is Action.WARN
    assert later.status()[1].startswith("serving the policy loaded at ")


def test_a_missing_file_at_a_later_start_keeps_the_last_good_policy(tmp_path, store):
    volume = ConfigMapVolume(tmp_path / "policy")
    volume.write(DENY)
    policy_reload.load_at_startup(volume.path, store)
    volume.remove_key()
    later = PolicySource(volume.path, keep=store, namespace="ns")
    assert slots_action(later) is Action.DENY
    assert later.status()[1].startswith(f"policy file {volume.path} is missing; the last good policy (loaded at ")
