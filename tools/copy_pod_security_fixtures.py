"""Copy upstream's PodSecurity test fixtures into tests/data/pod-security/, each distinct pod once.

    python3 tools/copy_pod_security_fixtures.py GIT_DIR [REF]

GIT_DIR is a clone of github.com/kubernetes/pod-security-admission (the published copy of
kubernetes' staging/src/k8s.io/pod-security-admission); REF defaults to HEAD. The fixtures of
test/testdata/{baseline,restricted}/v1.N/{pass,fail}/ repeat the same pod across versions, so each
distinct file is kept once under pods/ as NAME-BLOB.yaml (BLOB: the first 8 hex digits of its git
blob id) and index.txt lists every upstream path with the pod it holds. The copy is verbatim."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parent.parent / "tests" / "data" / "pod-security"
FIXTURE = re.compile(r"test/testdata/(baseline|restricted)/(v1\.\d+)/(pass|fail)/([a-z0-9_]+)\.yaml")


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True).stdout


def main(git_dir: str, ref: str = "HEAD") -> None:
    commit = git(git_dir, "rev-parse", ref).strip()
    entries = []
    for line in git(git_dir, "ls-tree", "-r", commit, "test/testdata").splitlines():
        _, _, blob, path = line.split(None, 3)
        match = FIXTURE.fullmatch(path)
        if match:
            entries.append((*match.groups(), blob))
    pods = TARGET / "pods"
    shutil.rmtree(pods, ignore_errors=True)
    pods.mkdir(parents=True)
    files: dict[str, str] = {}
    index = []
    for level, version, verdict, name, blob in sorted(entries, key=lambda e: (e[0], int(e[1][3:]), e[2], e[3])):
        file_name = f"{name}-{blob[:8]}.yaml"
        if files.setdefault(file_name, blob) != blob:
            raise SystemExit(f"two pods would share {file_name}")
        if not (pods / file_name).exists():
            (pods / file_name).write_bytes(
                subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "blob", blob], check=True,
                               capture_output=True).stdout)
        index.append(f"{level} {version} {verdict} {file_name}")
    (TARGET / "index.txt").write_text(
        f"# kubernetes/pod-security-admission {commit}: level version verdict pod (see README.md)\n"
        + "\n".join(index) + "\n")
    print(f"{len(index)} fixtures, {len(files)} distinct pods, from {commit}")


if __name__ == "__main__":
    main(*sys.argv[1:])
