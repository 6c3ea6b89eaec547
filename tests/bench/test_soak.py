"""``python3 -m bench soak --quick``: the hostile-client soak runs end to end, every attack at its
quick size, and the well-behaved clients see no failure during any of them (the full run's
latency targets are for a quiet 2-core machine; the quick run's looser ones only catch a stall)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.soak import ATTACKS
from tests.conftest import ROOT


def test_quick_soak_meets_its_targets(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, "-m", "bench", "soak", "--quick", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    results = {r["attack"]: r for r in json.loads(out.read_text())}
    assert list(results) == [a.name for a in ATTACKS]
    for attack in ATTACKS:
        result = results[attack.name]
        assert result["missed"] == []
        assert [c["name"] for c in result["clients"]] == [
            "kept-alive /validate", "new-connection /validate", "/healthz probe"]
        for client in result["clients"]:
            assert client["sent"] > 0 and client["failures"] == 0, client
        assert 0 < result["peak_worker_rss_mib"] <= result["peak_rss_mib"]
    assert results["one-byte"]["attack_stats"]["connections opened"] >= 100
    assert results["silent"]["attack_stats"]["connections opened"] >= 300
    assert results["dribble"]["attack_stats"]["clients connected"] >= 30
    assert results["big-bodies"]["attack_stats"]["big reviews answered"] > 0
    assert "all targets met" in done.stdout
