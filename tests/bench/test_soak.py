"""``python3 -m bench soak --quick``: the hostile-client soak runs end to end, its attacks at their
quick size, and the well-behaved clients see no failure during any of them (the full run's
latency targets are for a quiet 2-core machine; the quick run's looser ones only catch a stall).

Every run soaks one-byte connections, the big bodies, stalled bodies and the mixed attack; the ci
profile every attack (each attack is also a test of its own at test scale, in
tests/webhook/test_hostile_connections.py, test_stalled_bodies.py and test_client_auth.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.soak import ATTACKS
from tests.conftest import ROOT


# What each attack must at least have done for its run to count.
SIZES = {"one-byte": ("connections opened", 100), "silent": ("connections opened", 300),
         "dribble": ("clients connected", 30), "big-bodies": ("big reviews answered", 1),
         "stalled-bodies": ("clients connected", 30), "stalled-bodies-client-auth": ("clients connected", 30),
         "mixed": ("stalled-bodies: clients connected", 10),
         "big-and-partial-bodies": ("partial-bodies: clients connected", 25)}
EVERY_ATTACK = [a.name for a in ATTACKS]


@pytest.mark.parametrize("attacks", [
    pytest.param(["one-byte", "big-bodies", "stalled-bodies", "mixed"], id="one-byte-big-stalled-and-mixed"),
    pytest.param(EVERY_ATTACK, id="every-attack", marks=pytest.mark.ci_only),
])
def test_quick_soak_meets_its_targets(tmp_path: Path, attacks: list[str]) -> None:
    out = tmp_path / "soak.json"
    only = [] if attacks == EVERY_ATTACK else [f"--only={name}" for name in attacks]
    done = subprocess.run([sys.executable, "-m", "bench", "soak", "--quick", *only, "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    results = {r["attack"]: r for r in json.loads(out.read_text())}
    assert list(results) == attacks
    for name in attacks:
        result = results[name]
        assert result["missed"] == []
        assert [c["name"] for c in result["clients"]] == [
            "kept-alive /validate", "new-connection /validate", "/healthz probe"]
        for client in result["clients"]:
            assert client["sent"] > 0 and client["failures"] == 0, client
        assert 0 < result["peak_worker_rss_mib"] <= result["peak_rss_mib"]
        stat, least = SIZES[name]
        assert result["attack_stats"][stat] >= least, (name, result["attack_stats"])
    assert sorted(SIZES) == sorted(EVERY_ATTACK)
    assert "all targets met" in done.stdout
