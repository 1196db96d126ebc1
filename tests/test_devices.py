"""Device selection and multi-process training on this CPU machine: the GPU paths' logic
(vLLM environment, LearnedGate's default device) and real DDP with two CPU ranks (gloo),
where only rank zero may write the run folder."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from retrieval_gate.gates.learned import default_device
from retrieval_gate.generation.vllm_backend import engine_env, engine_kwargs, known_warnings_hidden


def test_vllm_multiprocessing_is_forced_off_only_on_cpu():
    assert engine_env(cuda=False)["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in engine_env(cuda=True)  # vLLM's own on GPUs
    assert engine_kwargs(cuda=True)["dtype"] == "auto"
    assert engine_kwargs(cuda=False)["enforce_eager"] is True


def test_vllm_logs_to_stderr_leaving_stdout_to_the_command(vllm_generator):
    """vLLM's log went to stdout by default: `retrieval-gate rag > table.md` held 40 lines of
    engine start-up above the table. The session's engine was started as the CLI starts one;
    its logging, configured again as LLM(...) configures it, writes to stderr alone (checked
    in the engine's process: a subprocess importing vLLM for it took 20 s)."""
    import logging

    from vllm.config.logging import LoggingConfig
    from vllm.logger import configure_logging

    stream = engine_env(cuda=False)["VLLM_LOGGING_STREAM"]
    assert engine_env(cuda=True)["VLLM_LOGGING_STREAM"] == stream  # the same on GPUs
    assert os.environ["VLLM_LOGGING_STREAM"] == stream  # set before the engine started
    configure_logging(LoggingConfig())  # as LLM(...) does
    handlers = logging.getLogger("vllm").handlers
    streams = [h.stream for h in handlers if isinstance(h, logging.StreamHandler)]
    assert streams and all(s is sys.stderr for s in streams), streams
    assert sys.stdout is not sys.stderr


def test_vllms_reduce_op_notice_is_hidden_at_engine_start():
    """Every engine start printed two FutureWarnings about `torch.distributed.reduce_op`: vLLM's
    kernel dispatcher reads the attributes of every module's objects, that one among them (in
    each of the demo's generator stages). torch's notice, met as the dispatcher meets it, is
    hidden inside the block the engine starts in; outside it still shows."""
    import warnings
    from contextlib import nullcontext

    import torch.distributed as dist

    def said(hidden: bool) -> list[str]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with known_warnings_hidden() if hidden else nullcontext():
                hasattr(dist.reduce_op, "__dict__")  # as vllm/triton_utils/dispatcher.py does
        return [str(w.message) for w in seen]

    assert any("reduce_op" in m for m in said(hidden=False))
    assert said(hidden=True) == []


def test_vllms_log_is_warnings_only_without_verbose(monkeypatch):
    """An engine start printed ~40 lines of vLLM's log (its INFO lines, the engine's whole
    config among them, and warnings about settings chosen on purpose) between a command's
    progress bar and its notes: its level is WARNING unless the command runs with -v (then
    INFO, and the known lines shown), and a variable the user set wins (`setdefault`)."""
    from retrieval_gate.cli import configure_logging

    configure_logging(logging.INFO)
    assert engine_env(cuda=False)["VLLM_LOGGING_LEVEL"] == "WARNING"
    assert engine_env(cuda=True)["VLLM_LOGGING_LEVEL"] == "WARNING"
    configure_logging(logging.DEBUG)
    assert engine_env(cuda=False)["VLLM_LOGGING_LEVEL"] == "INFO"
    configure_logging(logging.INFO)

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("vllm.config.vllm")
    monkeypatch.setattr(logger, "filters", [])  # this test's own, put back after it
    logger.addHandler(handler)
    try:
        with known_warnings_hidden():
            logger.warning("Enforce eager set, disabling torch.compile, CUDAGraphs, ...")
            logger.warning("max_num_batched_tokens is smaller than max_model_len")
    finally:
        logger.removeHandler(handler)
    assert said == ["max_num_batched_tokens is smaller than max_model_len"]


def test_learned_gate_default_device_follows_cuda():
    assert default_device() == ("cuda" if torch.cuda.is_available() else "cpu")


DDP_SCRIPT = """
import json, sys
from pathlib import Path
# the CLI's collector thresholds (cli.main sets them): both ranks import torch & co without a
# full collection walking them ten times (~2.5 s of each rank's start), nor one at exit
from retrieval_gate.gc_thresholds import freeze_at_exit, raise_for_imports
raise_for_imports()
freeze_at_exit()
from tiny_backbones import synthetic_questions, tiny_backbone, tiny_config, write_label_file
from retrieval_gate.training import train

root = Path(sys.argv[1])
questions, labels = synthetic_questions(96, seed=3)
model = tiny_backbone("roberta", root / "model", [q.text for q in questions])
cfg = tiny_config(write_label_file(root / "labels.jsonl", labels), root / "ck", "encoder",
                  str(model), pooling="cls")
cfg = cfg.override("run.name=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                   "trainer.strategy=ddp", "trainer.limit_train_batches=2")
run_dir = train(cfg, questions=questions)
import os
import torch.distributed as dist
# one write(2) per rank: the two ranks share this pipe, and a line under PIPE_BUF is not split
os.write(1, f"RANK-DONE {dist.get_rank()} {(run_dir / 'metrics.json').is_file()}\\n".encode())
"""


@pytest.mark.slow  # a subprocess
def test_ddp_on_two_cpu_ranks_writes_the_run_folder_once(tmp_path):
    script = tmp_path / "ddp_train.py"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
           os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = sorted(line for line in proc.stdout.splitlines() if line.startswith("RANK-DONE"))
    # both ranks returned, and each found the folder written (the barrier waited for rank 0)
    assert done == ["RANK-DONE 0 True", "RANK-DONE 1 True"], proc.stdout[-2000:]
    run_dir = tmp_path / "ck" / "ddp"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and 0.0 <= metrics["test"]["auroc"] <= 1.0
    assert not list(run_dir.rglob("*.tmp"))


@pytest.mark.slow  # a subprocess
def test_check_gpu_lists_what_it_could_not_check_and_fails_without_cuda():
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(["bash", str(root / "scripts/check_gpu.sh")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHON": sys.executable})  # fmt: skip
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 11 and "| train 20 steps, trainer.devices=auto, bf16 |" in proc.stdout
    if not torch.cuda.is_available():
        assert proc.returncode == 1 and all("| not checked |" in row for row in rows), proc.stdout


def test_check_gpu_job_steps_parse_with_the_real_cli(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from check_gpu import job_steps

    from retrieval_gate.cli import build_parser

    for step in job_steps(tmp_path):
        assert callable(build_parser(step.args).parse_args(step.args).run), step.args


def test_check_gpu_table_keeps_a_pipe_in_a_detail_inside_its_cell():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from check_gpu import table

    row = table([("score", "FAILED", "exit 2: --variant fp16|int8 expected")]).splitlines()[2]
    assert row == "| score | FAILED | exit 2: --variant fp16\\|int8 expected |"
    assert len(row.replace("\\|", "").split("|")) == 5  # three cells


@pytest.mark.slow  # a training run and two LLM loads
def test_check_gpu_comparisons_run_end_to_end_on_tiny_models(tmp_path):
    """The CUDA rows' bodies, pointed at the CPU on both sides (gaps of zero): a GPU machine is
    the only place their CUDA side runs, so the rest of them is exercised here."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from check_gpu import QUESTIONS, gate_on_cuda, llm_on_cuda

    from retrieval_gate.training import train
    from tiny_backbones import synthetic_questions, tiny_backbone, tiny_config, write_label_file

    questions, labels = synthetic_questions(64, seed=5)
    texts = [q.text for q in questions] + QUESTIONS
    body = tiny_backbone("roberta", tmp_path / "body", texts)
    cfg = tiny_config(write_label_file(tmp_path / "labels.jsonl", labels), tmp_path / "ck",
                      "encoder", str(body), pooling="cls")  # fmt: skip
    run = train(cfg.override("run.name=gate", "trainer.accelerator=cpu"), questions=questions)
    ok, detail = gate_on_cuda(run, device="cpu")
    assert ok and f"{len(QUESTIONS)} questions, largest probability gap 0.0e+00" == detail
    llm = tiny_backbone("llama", tmp_path / "llm", texts)
    ok, detail = llm_on_cuda(str(llm), device="cpu")
    assert ok, detail
    assert "max relative gap 0.0e+00" in detail and f"equal for {len(QUESTIONS)}/" in detail
