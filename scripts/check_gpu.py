"""Runs the main job's GPU paths on a CUDA machine and prints one table; exits non-zero unless
every row passed. On a machine without CUDA it runs nothing heavy: the table says what could
not be checked and why.

Rows: the install (ONNX Runtime CUDA provider with only onnxruntime-gpu, vLLM on CUDA, a bf16
training step), then the job itself, each step a `retrieval-gate` verb feeding the next:
label a few questions on vLLM-CUDA, and again with vLLM engines as Ray actors (`label --engine
ray --ray-backend vllm`, docs/scale.md) -> train 20 steps with trainer.devices=auto -> export fp16
-> score with the CUDA provider -> one adaptive RAG call."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from check_gpu_env import bf16_step_line, onnxruntime_line, vllm_line

ROOT = Path(__file__).resolve().parent.parent
LABELS = ROOT / "data/labels/smollm2-135m-instruct/closed-book.jsonl"


def job_steps(work: Path) -> list[tuple[str, list[str], str]]:
    """(name, retrieval-gate arguments, text its stderr/stdout must contain)."""
    run, export = work / "ck" / "gpu-check", work / "export" / "gpu-check"
    questions = work / "questions.txt"
    questions.write_text("Who wrote Hamlet?\nWhat is Henry Feilden's occupation?\n")
    return [
        ("label 8 questions on vLLM-CUDA",
         ["label", "--policy", "closed-book", "--dataset", "popqa", "--limit", "8",
          "--backend", "vllm", "--out", str(work / "labels.jsonl")], ""),
        # ray.data.llm's vLLMEngineProcessorConfig: one engine replica as a Ray actor on a GPU
        # (a local Ray started by the command; cannot run on a CPU-only machine)
        ("label 8 questions with vLLM engines as Ray actors",
         ["label", "--policy", "closed-book", "--dataset", "popqa", "--limit", "8",
          "--engine", "ray", "--ray-backend", "vllm", "--actors", "1",
          "--out", str(work / "labels-ray.jsonl")], ""),
        ("train 20 steps, trainer.devices=auto, bf16",
         ["train", "--config", str(ROOT / "configs/experiments/minilm-closed-book.yaml"),
          "--set", f"data.label_file={LABELS}", f"run.output_dir={work / 'ck'}",
          "run.name=gpu-check", "trainer.devices=auto", "trainer.max_steps=20",
          "trainer.precision=bf16-mixed"], ""),
        ("export fp32 + fp16",
         ["export", "--run", str(run), "--out-dir", str(work / "export"),
          "--variants", "fp32", "fp16", "--parity-limit", "200"], ""),
        ("score fp16 with the CUDA provider",
         ["score", "--model", str(export), "--input", str(questions), "--variant", "fp16",
          "--provider", "cuda"], "CUDAExecutionProvider"),
        ("one adaptive RAG call (ONNX gate, vLLM)",
         ["rag", "--split", "test", "--limit", "4", "--modes", "onnx", "--onnx", str(export),
          "--out", str(work / "rag.md")], ""),
    ]  # fmt: skip


def run_step(args: list[str], expect: str) -> tuple[str, str]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "retrieval_gate.cli", *args], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    seconds = f"{time.perf_counter() - started:.0f} s"
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return "FAILED", f"exit {proc.returncode}: {output.strip().splitlines()[-1][:120]}"
    if expect and expect not in output:
        return "FAILED", f"{expect} not reported ({seconds})"
    return "ok", seconds


def has_cuda_device() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def main() -> int:
    rows, cuda, device = [], True, has_cuda_device()
    for name, check in (("install: ONNX Runtime CUDA provider", onnxruntime_line),
                        ("install: vLLM device", vllm_line),
                        ("install: bf16 training step", bf16_step_line)):  # fmt: skip
        try:
            ok, detail = check()
        except Exception as e:  # noqa: BLE001  (a missing package is a row, not a crash)
            ok, detail = False, f"{type(e).__name__}: {e}"
        status = "ok" if ok else "FAILED" if device else "not checked"
        rows.append((name, status, detail if device else f"no CUDA device here: {detail}"))
        cuda = cuda and ok
    with tempfile.TemporaryDirectory(prefix="rg-check-gpu-") as tmp:
        steps, failed = job_steps(Path(tmp)), False
        for name, args, expect in steps:
            if not cuda:
                rows.append((name, "not checked", "no usable CUDA install (rows above)"))
            elif failed:
                rows.append((name, "not checked", "an earlier step failed"))
            else:
                status, detail = run_step(args, expect)
                failed = status != "ok"
                rows.append((name, status, detail))
    print("| check | status | detail |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    unchecked = sum(status != "ok" for _, status, _ in rows)
    print(f"\n{len(rows) - unchecked}/{len(rows)} GPU paths checked and passed.")
    return 0 if unchecked == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
