"""Runs the main job's GPU paths on a CUDA machine and prints one table; exits non-zero unless
every row passed. On a machine without CUDA it runs nothing heavy: the table says what could
not be checked and why.

Rows: the install (ONNX Runtime CUDA provider with only onnxruntime-gpu, vLLM on CUDA, a bf16
training step), then the job itself, each step a `retrieval-gate` verb feeding the next:
label a few questions on vLLM-CUDA, and again with vLLM engines as Ray actors (`label --engine
ray --ray-backend vllm`, docs/scale.md) -> train 20 steps with trainer.devices=auto -> the
trained gate on CUDA against CPU -> export fp16 -> score with the CUDA provider -> one adaptive
RAG call; and the user's LLM read through transformers on CUDA against CPU (hidden states,
choice scores, generation; `--llm FOLDER`, default the prepared SmolLM2).

Each row runs when what it needs passed (the install rows, the steps it builds on), so a
machine without vLLM still checks training, the trained gate and the LLM on CUDA."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from check_gpu_env import bf16_step_line, onnxruntime_line, vllm_line

ROOT = Path(__file__).resolve().parent.parent
LABELS = ROOT / "data/labels/smollm2-135m-instruct/closed-book.jsonl"
INSTALL = {"onnxruntime-gpu": ("install: ONNX Runtime CUDA provider", onnxruntime_line),
           "vllm": ("install: vLLM device", vllm_line),
           "torch": ("install: bf16 training step", bf16_step_line)}  # fmt: skip
# questions of different lengths, so the CUDA gate reads batches of several widths
QUESTIONS = [f"{head} {entity}?" for head in ("Who wrote", "What is the capital of",
             "In which year was the treaty signed that ended the war fought by")
             for entity in ("Hamlet", "France", "Henry Feilden", "the Republic of Upper Volta",
                            "Zorblat Quenvik", "the Holy Roman Empire and its neighbours")]  # fmt: skip


class CliStep(NamedTuple):
    key: str  # what later rows name in `needs`
    name: str
    args: list[str]  # retrieval-gate arguments
    expect: str  # text its output must contain
    needs: tuple[str, ...]  # install rows and earlier steps that must have passed


def job_steps(work: Path) -> list[CliStep]:
    run, export = work / "ck" / "gpu-check", work / "export" / "gpu-check"
    questions = work / "questions.txt"
    questions.write_text("Who wrote Hamlet?\nWhat is Henry Feilden's occupation?\n")
    return [
        CliStep("label", "label 8 questions on vLLM-CUDA",
                ["label", "--policy", "closed-book", "--dataset", "popqa", "--limit", "8",
                 "--backend", "vllm", "--out", str(work / "labels.jsonl")], "", ("vllm",)),
        # ray.data.llm's vLLMEngineProcessorConfig: one engine replica as a Ray actor on a GPU
        # (a local Ray started by the command; cannot run on a CPU-only machine)
        CliStep("label-ray", "label 8 questions with vLLM engines as Ray actors",
                ["label", "--policy", "closed-book", "--dataset", "popqa", "--limit", "8",
                 "--engine", "ray", "--ray-backend", "vllm", "--actors", "1",
                 "--out", str(work / "labels-ray.jsonl")], "", ("vllm",)),
        CliStep("train", "train 20 steps, trainer.devices=auto, bf16",
                ["train", "--config", str(ROOT / "configs/experiments/minilm-closed-book.yaml"),
                 "--set", f"data.label_file={LABELS}", f"run.output_dir={work / 'ck'}",
                 "run.name=gpu-check", "trainer.devices=auto", "trainer.max_steps=20",
                 "trainer.precision=bf16-mixed"], "", ("torch",)),
        CliStep("export", "export fp32 + fp16",
                ["export", "--run", str(run), "--out-dir", str(work / "export"),
                 "--variants", "fp32", "fp16", "--parity-limit", "200"], "", ("train",)),
        CliStep("score", "score fp16 with the CUDA provider",
                ["score", "--model", str(export), "--input", str(questions), "--variant",
                 "fp16", "--provider", "cuda"], "CUDAExecutionProvider",
                ("onnxruntime-gpu", "export")),
        CliStep("rag", "one adaptive RAG call (ONNX gate, vLLM)",
                ["rag", "--split", "test", "--limit", "4", "--modes", "onnx", "--onnx",
                 str(export), "--out", str(work / "rag.md")], "", ("vllm", "export")),
    ]  # fmt: skip


def run_step(args: list[str], expect: str) -> tuple[str, str]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "retrieval_gate.cli", *args], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    seconds = f"{time.perf_counter() - started:.0f} s"
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return "FAILED", f"exit {proc.returncode}: {output.strip().splitlines()[-1][:160]}"
    if expect and expect not in output:
        return "FAILED", f"{expect} not reported ({seconds})"
    return "ok", seconds


def gate_on_cuda(run: Path, device: str = "cuda") -> tuple[bool, str]:
    """The trained gate scores the same on `device` as on CPU (fp32 both)."""
    import numpy as np

    from retrieval_gate.gates.learned import LearnedGate

    cpu = LearnedGate(run, device="cpu", batch_size=8).score_texts(QUESTIONS)
    cuda = LearnedGate(run, device=device, batch_size=8).score_texts(QUESTIONS)
    gap = float(np.max(np.abs(cpu - cuda)))
    return gap < 1e-3, f"{len(QUESTIONS)} questions, largest probability gap {gap:.1e}"


def relative_gap(a: Any, b: Any) -> float:
    """max |a - b| over max |a| (numpy arrays)."""
    import numpy as np

    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(a))), 1e-12))


def llm_on_cuda(llm: str, device: str = "cuda") -> tuple[bool, str]:
    """The user's LLM read through transformers on `device` against CPU: hidden states (fp32
    both, the probe gate's features), choice scores and greedy generation (bf16 on CUDA)."""
    import numpy as np

    from retrieval_gate.generation.hf_backend import TransformersGenerator
    from retrieval_gate.generation.hidden_states import HiddenStateReader

    devices = {"cpu": "cpu", "cuda": device}
    states = {k: HiddenStateReader(llm, store=None, device=d) for k, d in devices.items()}
    layers = [1, states["cpu"].num_layers]
    got = {d: r.states(QUESTIONS, layers) for d, r in states.items()}
    state_gap = max(relative_gap(got["cpu"][x], got["cuda"][x]) for x in layers)
    gens = {k: TransformersGenerator(llm, device=d) for k, d in devices.items()}
    probs = {d: g.choice_probs(QUESTIONS, ["Yes", "No"]) for d, g in gens.items()}
    prob_gap = float(np.max(np.abs(probs["cpu"] - probs["cuda"])))
    out = {d: g.generate(QUESTIONS, max_new_tokens=8, logprobs=True) for d, g in gens.items()}
    finite = all(g.token_logprobs and np.isfinite(g.token_logprobs).all() for g in out["cuda"])
    same = sum(a.text == b.text for a, b in zip(out["cpu"], out["cuda"], strict=True))
    ok = state_gap < 1e-3 and prob_gap < 0.05 and finite
    return ok, (f"hidden states (layers {layers}) max relative gap {state_gap:.1e}; "
                f"choice P max gap {prob_gap:.3f} (bf16); greedy text equal for "
                f"{same}/{len(QUESTIONS)}; token log-probs finite: {finite}")  # fmt: skip


def default_llm() -> str:
    from retrieval_gate.generation.model_folders import resolve_generator_model

    return resolve_generator_model("smollm2-135m-instruct")


def check(fn: Callable[[], tuple[bool, str]]) -> tuple[str, str]:
    started = time.perf_counter()
    try:
        ok, detail = fn()
    except Exception as e:  # noqa: BLE001  (a failed check is a row, not a crash)
        ok, detail = False, f"{type(e).__name__}: {str(e)[:160]}"
    return ("ok" if ok else "FAILED"), f"{detail} ({time.perf_counter() - started:.0f} s)"


Row = tuple[str, str, str]  # check, status, detail
Step = tuple[str, str, tuple[str, ...], Callable[[], tuple[str, str]]]  # key, name, needs, run


def all_steps(work: Path, llm: str | None) -> list[Step]:
    """The verbs in order, the trained gate's comparison after training, the LLM's last."""
    steps: list[Step] = [(s.key, s.name, s.needs, lambda s=s: run_step(s.args, s.expect))
                         for s in job_steps(work)]  # fmt: skip
    run = work / "ck" / "gpu-check"
    steps.insert(3, ("gate-cuda", "the trained gate on CUDA scores as on CPU", ("train",),
                     lambda: check(lambda: gate_on_cuda(run))))  # fmt: skip
    steps.append(("llm-cuda", "the LLM through transformers on CUDA matches CPU", ("torch",),
                  lambda: check(lambda: llm_on_cuda(llm or default_llm()))))  # fmt: skip
    return steps


def install_rows(device: bool) -> tuple[list[Row], set[str]]:
    rows, passed = [], set()
    for key, (name, line) in INSTALL.items():
        try:
            ok, detail = line()
        except Exception as e:  # noqa: BLE001  (a missing package is a row, not a crash)
            ok, detail = False, f"{type(e).__name__}: {e}"
        status = "ok" if ok else "FAILED" if device else "not checked"
        rows.append((name, status, detail if device else f"no CUDA device here: {detail}"))
        if ok:
            passed.add(key)
    return rows, passed


def step_rows(steps: list[Step], passed: set[str]) -> list[Row]:
    """Each step that what it needs allows, in order; `passed` grows with the steps that pass."""
    titles = {key: name for key, (name, _) in INSTALL.items()}
    titles |= {key: name for key, name, _, _ in steps}
    rows = []
    for key, name, needs, step in steps:
        missing = [f"'{titles[n]}'" for n in needs if n not in passed]
        if missing:
            rows.append((name, "not checked", f"needs {'; '.join(missing)} to pass first"))
            continue
        status, detail = step()
        rows.append((name, status, detail))
        if status == "ok":
            passed.add(key)
    return rows


def table(rows: list[Row]) -> str:
    """Markdown; a "|" in a detail (an error message, say) is escaped, not a new cell."""
    lines = ["| check | status | detail |", "|---|---|---|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", help="LLM folder for the transformers-on-CUDA row "
                        "(default: the prepared SmolLM2-135M-Instruct)")  # fmt: skip
    args = parser.parse_args(argv)
    rows, passed = install_rows(has_cuda_device())
    with tempfile.TemporaryDirectory(prefix="rg-check-gpu-") as tmp:
        rows += step_rows(all_steps(Path(tmp), args.llm), passed)
    print(table(rows))
    unchecked = sum(status != "ok" for _, status, _ in rows)
    print(f"\n{len(rows) - unchecked}/{len(rows)} GPU paths checked and passed.")
    return 0 if unchecked == 0 else 1


def has_cuda_device() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


if __name__ == "__main__":
    sys.exit(main())
