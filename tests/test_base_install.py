"""The base install is enough to score: a fresh venv gets the repo installed (non-editable, no
extras), then runs the README's 3-line API example and `retrieval-gate score` on a real
export, and `import torch` fails there. Installs from PyPI with uv where `make setup` put it
(4 s; pip, ~22 s on 2 cores, installed the same packages), else with pip."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def readme_example() -> str:
    """The python block of the README's "Python API" section, as a user would paste it."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Python API") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("install")
    # A copy of what the package is built from, so the build writes nothing into the repo.
    src = root / "src-copy"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__"))
    venv = root / "venv"
    # RG_BASE_PYTHON=python3.13 checks the base install on another interpreter (by hand)
    made = run([os.environ.get("RG_BASE_PYTHON", sys.executable), "-m", "venv", "--without-pip",
                str(venv)])  # fmt: skip
    assert made.returncode == 0, made.stderr
    # this venv's pip installs into it (`pip --python`), as the new venv's own would: making
    # that one (ensurepip) took 5 s, and it ran uncompiled where PYTHONDONTWRITEBYTECODE is set
    # (the install 18 s against 12 s)
    target = ["--python", str(venv / "bin/python")]
    uv = Path(sys.executable).with_name("uv")
    if uv.is_file() and run([str(uv), "pip", "install", "-q", *target, str(src)]).returncode == 0:
        return venv  # as scripts/setup.sh installs: uv where it works, else pip
    pip = run([sys.executable, "-m", "pip", *target, "install", "-q", str(src)])
    assert pip.returncode == 0, pip.stderr[-3000:]
    return venv


@pytest.mark.slow
def test_base_install_has_no_torch_and_scores_with_the_readme_example(base_venv, minilm_gate_dirs):
    _, export_dir = minilm_gate_dirs
    python = str(base_venv / "bin/python")
    no_torch = run([python, "-c", "import torch"])
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr
    code = readme_example()
    assert len(code.strip().splitlines()) == 3, code
    proc = run([python, "-c", code.replace("runs/demo/export/minilm-gate", str(export_dir))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    probs, decision = re.fullmatch(r"\[([-0-9.e ]+)\] (True|False)\n", proc.stdout).groups()
    assert len(probs.split()) == 2 and all(0.0 <= float(p) <= 1.0 for p in probs.split())


@pytest.mark.slow
def test_score_command_from_the_non_editable_install(base_venv, minilm_gate_dirs, tmp_path):
    _, export_dir = minilm_gate_dirs
    questions = tmp_path / "q.txt"
    questions.write_text("Who wrote Hamlet?\n\nWhat is Henry Feilden's occupation?\n")
    proc = run([str(base_venv / "bin/retrieval-gate"), "score", "--model", str(export_dir),
                "--input", str(questions), "--variant", "int8"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [("score" in r, r.get("error")) for r in rows] == [
        (True, None), (False, "empty question"), (True, None)
    ]  # fmt: skip
    assert "CPUExecutionProvider" in proc.stderr
    # a heavy verb says which extra it needs instead of a bare ImportError traceback
    heavy = run([str(base_venv / "bin/retrieval-gate"), "train", "--config", "x.yaml"])
    assert heavy.returncode == 3 and "pip install 'retrieval-gate[train]'" in heavy.stderr
