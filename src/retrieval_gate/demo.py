"""The main job end to end: each stage is one `retrieval-gate` verb run in its own process,
writing under `runs/demo/` (on Linux forked from this one, which imports torch, transformers
and vLLM once for all of them: `preload`). A finished stage leaves `<stage>.done.json`
(command, seconds, a checksum of its inputs and of the files it made: `stage_markers`) and is
reused on the next run while its inputs are unchanged and the files it made (`Stage.outputs`)
are there as it left them; `--stage NAME` re-runs one stage alone, `--force` all of them.

Each stage has a time budget (its share of 15 minutes on a quiet 2-core machine); a stage past
it prints, once a minute, where it is and how long it still needs, read from the last progress
bar (tqdm) in its output. Ctrl-C stops the running stage without marking it done, so the next
run starts there; REPORT.md and the done markers are written to a temporary file and renamed,
so an interrupted run never leaves half of one. A REPORT.md in the folder that the demo did
not write is refused before the first stage (`outputs`' ledger)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import preload, work
from .artifacts import EXPORT_METADATA, EXPORT_TOKENIZER, VARIANTS
from .errors import ConfigError, InputError
from .fileio import one_writer, write_text
from .labels import LABELS_DIR
from .outputs import refuse_foreign, vouch_for, write_owned
from .rag.cascade import CASCADE
from .rag.modes import DEFAULT_MODES
from .run_folder import RunFolder
from .stage_markers import (
    MARKER,
    damaged_output,
    folder_key,
    inputs_key,
    output_record,
    read_marker,
    shared_key,
)
from .strict_rows import parse_json
from .tables import markdown_table

# Relative to the project root (the demo's working directory) so commands read as typed.
CLOSED_BOOK = os.path.relpath(LABELS_DIR / "smollm2-135m-instruct" / "closed-book.jsonl")
# CPU budget of the demo (15 minutes on 2 cores): every gate, the LLM-prompted ones included,
# scores a seeded sample of the test split (600 questions: AUROC CIs about +-0.04), and the
# RAG loop runs every mode on a smaller one.
EVAL_QUESTIONS = 600
RAG_QUESTIONS = 60
NOTE_EVERY = 60.0  # seconds between "still running" notes once a stage is past its budget
MANIFEST = RunFolder.MANIFEST  # every run and export folder holds one (`artifacts`)


@dataclass(frozen=True)
class Stage:
    name: str
    title: str
    argv: Callable[[Path], list[str]]  # the verb's arguments, given the demo folder
    # seconds on a quiet 2-core machine without AVX-512 (vLLM in fp32 there), where the main
    # job is judged; the stages sum to 15 minutes at most. The generator stages (evaluate, rag)
    # get the most: fp32 generation is where such a machine is slowest.
    budget: float
    # the stages whose results it reads: it runs again when one of them (or theirs) did
    reads: tuple[str, ...] = ()
    preload: bool = True  # forked from the process that imported torch once (`preload`)
    # the files it makes, given the demo folder (a run's weights, configs, tokenizer and
    # manifest; an export's variants): its marker records their digests, and it is reused only
    # while they are there as it left them (`stage_markers.damaged_output`)
    outputs: Callable[[Path], list[Path]] = lambda out: []
    # files a forced or requested run removes first: the verb would resume from them
    fresh: Callable[[Path], list[Path]] = lambda out: []
    # it reads the Adaptive-RAG release ($RETRIEVAL_GATE_ADAPTIVE_RAG, else the data folder's):
    # the release's files are among its inputs
    release: bool = False


def _sample(out: Path) -> Path:
    return out / "labels-sample" / "closed-book.jsonl"


def _label_sample(out: Path) -> list[str]:
    # Re-label a small sample to show the step works; the committed labels are reused below.
    return [
        *"label --policy closed-book --dataset retrievalqa --limit 24".split(),
        "--out",
        str(_sample(out)),
    ]


def _sample_files(out: Path) -> list[Path]:
    # the label verb resumes a label file (an edited row survived `--force`): a forced run
    # removes it, its provenance and its list of failed questions, and labels the sample anew
    sample = _sample(out)
    stem = sample.name.removesuffix(".jsonl")
    return [sample, sample.with_name(f"{stem}.meta.json"), sample.with_name(f"{stem}.failed.jsonl")]


def _run_dir(out: Path) -> Path:
    return out / "checkpoints" / "minilm-closed-book"


def _export_dir(out: Path) -> Path:
    return out / "export" / "minilm-gate"


def _run_files(run: Path) -> list[Path]:
    """What loading a run reads (`RunFolder.REQUIRED`, its folders' files) and its manifest."""
    named = [run / name for name in (*RunFolder.REQUIRED, MANIFEST)]
    return [f for p in named for f in (sorted(q for q in p.rglob("*") if q.is_file())
                                       if p.is_dir() else [p])]  # fmt: skip


def _tuned(run: Path) -> list[Path]:
    """What tune's --save-objective rewrites in a run: its metadata and the manifest's record
    of it (train's marker recorded the manifest before: a second demo re-ran the router)."""
    return [run / RunFolder.METADATA, run / MANIFEST]


def _export_files(export: Path) -> list[Path]:
    """The demo's export: its two variants, the tokenizer and metadata they run with."""
    names = (VARIANTS["fp32"], VARIANTS["int8"], EXPORT_TOKENIZER, EXPORT_METADATA, MANIFEST)
    return [export / name for name in names]


# The demo's gate (issues 37, 38): the stacked head on frozen MiniLM, fitted in seconds, its
# question-only AUROC within the CI of the full fine-tune (minilm-closed-book.yaml, for GPUs),
# and its second level reading SmolLM2's closed-book answer (the two-stage gate: evaluate shows
# it beside its own question-only score; rag's cascade mode escalates on it); docs/train.md.
GATE_CONFIG = "configs/experiments/cascade-closed-book.yaml"


def _train(out: Path) -> list[str]:
    sets = [f"run.output_dir={out / 'checkpoints'}", "run.name=minilm-closed-book"]
    # no epochs to resume: a killed stage re-fits (seconds), and a demo folder holding the
    # fine-tuned gate of an earlier version is replaced rather than refused
    return ["train", "--config", GATE_CONFIG, "--overwrite", "--set", *sets]


def _tune(out: Path) -> list[str]:
    objectives = "macro-f1 adaptive-accuracy min-retrieval pareto".split()
    # Optuna's journal file, not SQLite: the Pareto study's 100 trials cost ~64 ms each in
    # SQLAlchemy on a 2-core Zen 3 (the stage 38-41 s against 50 s; one process either way)
    return ["tune", "--gate", "learned", "--labels", CLOSED_BOOK, "--objective", *objectives,
            "--learned-run", str(_run_dir(out)), "--save-objective", "adaptive-accuracy",
            "--storage", f"journal:{out / 'tune' / 'studies.journal'}",
            "--out", str(out / "tune")]  # fmt: skip


def _export(out: Path) -> list[str]:
    return ["export", "--run", str(_run_dir(out)), "--name", _export_dir(out).name,
            "--out-dir", str(_export_dir(out).parent), "--variants", "fp32", "int8"]  # fmt: skip


def _evaluate(out: Path) -> list[str]:
    gates = "always never popularity confidence tfidf prompt-vanilla prompt-ta-are learned onnx"
    # the cost column times 15 questions one at a time (5 for the gates that ask the
    # generator, each call an fp32 prefill on a slow CPU) instead of evaluate's 30 (10)
    return ["evaluate", "--labels", CLOSED_BOOK, "--gates", *gates.split(),
            "--learned-run", str(_run_dir(out)), "--onnx", str(_export_dir(out)),
            "--limit", str(EVAL_QUESTIONS), "--cost-questions", "15",
            "--out", str(out / "evaluate")]  # fmt: skip


def _rag(out: Path) -> list[str]:
    # the default modes and the cascade: the gate's question-only score decides first, its
    # answer level reads the closed-book answers it kept and escalates the unsure ones
    return ["rag", "--split", "test", "--limit", str(RAG_QUESTIONS), "--seed", "0",
            "--modes", *DEFAULT_MODES, CASCADE, "--router", str(_export_dir(out)),
            "--answer-gate", str(_export_dir(out)),
            "--onnx", str(_export_dir(out)), "--learned-run", str(_run_dir(out)),
            "--labels", CLOSED_BOOK, "--oracle-labels", CLOSED_BOOK,
            "--out", str(out / "rag" / "rag.md")]  # fmt: skip


# The router on Llama-3.1-8B's recorded outcomes (the adaptive-rag bundle, read in place):
# the shipped config as it is (the stacked head: no epochs, fitted on train and dev), its
# default budget 1.0 calibrated on out-of-fold predictions when training ends, exported beside
# the binary gate, and every routing policy scored on the seeded test split of the 3,000
# questions.
ROUTER_CONFIG = "configs/experiments/router-adaptive-rag-llama8b.yaml"


def _router_run(out: Path) -> Path:
    return out / "checkpoints" / "router-llama8b"


def _router_export(out: Path) -> Path:
    return out / "export" / "router-llama8b"


def _router_train(out: Path) -> list[str]:
    sets = [f"run.output_dir={out / 'checkpoints'}", "run.name=router-llama8b"]
    return ["train", "--config", ROUTER_CONFIG, "--resume", "--set", *sets]


def _router_tune(out: Path) -> list[str]:
    # the budget objectives' exact sweeps on the run's calibration curve (out-of-fold
    # train+dev); the budget-1.0 operating point is saved into the run (the one training
    # calibrated), the Pareto front goes into the report
    return ["tune", "--gate", "learned", "--learned-run", str(_router_run(out)), "--labels",
            "adaptive-rag", "--objective", "budget-accuracy", "min-cost", "cost-pareto",
            "--budget", "1.0", "--target", "1.0", "--save-objective", "budget-accuracy",
            "--out", str(out / "router-tune")]  # fmt: skip


def _router_export_argv(out: Path) -> list[str]:
    return ["export", "--run", str(_router_run(out)), "--name", _router_export(out).name,
            "--out-dir", str(_router_export(out).parent), "--variants", "fp32", "int8"]  # fmt: skip


def _router_evaluate(out: Path) -> list[str]:
    return ["evaluate", "--labels", "adaptive-rag", "--gates", "onnx", "--onnx",
            str(_router_export(out)), "--no-cost", "--out", str(out / "router")]  # fmt: skip


# Budgets: what each stage took on a real 2-core AVX2-only AMD EPYC Zen 3 (vLLM in fp32;
# 2026-11-30: labels 36-51 s, tune 35-41 s, evaluate 245 s, RAG 178-181 s), with room for a
# slower AVX2 core; 890 s together.
STAGES = [
    Stage("data", "data summary", lambda out: ["data", "summary"], 10, preload=False),
    Stage("models", "model preparation", lambda out: ["models", "prepare"], 40),
    Stage("labels", "labels (committed SmolLM2 labels; re-label a sample)", _label_sample, 60,
          ("models",), outputs=lambda out: [_sample(out)], fresh=_sample_files),
    Stage("train", "train the MiniLM gate", _train, 80, ("models",),
          outputs=lambda out: _run_files(_run_dir(out))),
    # tune saves the threshold into the run's metadata.json (and its manifest's checksum of
    # it), which export carries
    Stage("tune", "tune its threshold (Optuna)", _tune, 50, ("train",),
          outputs=lambda out: [_section(out, "tune"), *_tuned(_run_dir(out))]),
    Stage("export", "export ONNX (+int8)", _export, 40, ("tune",),
          outputs=lambda out: _export_files(_export_dir(out))),
    Stage("evaluate", "evaluate against every baseline", _evaluate, 280, ("export",),
          outputs=lambda out: [_section(out, "evaluate")]),
    Stage("rag", "adaptive RAG loop on held-out questions", _rag, 215, ("export",),
          outputs=lambda out: [_section(out, "rag")]),
    Stage("router-train", "train the Llama-3.1-8B router (no / one / multi-step retrieval)",
          _router_train, 45, ("models",), outputs=lambda out: _run_files(_router_run(out)),
          release=True),
    Stage("router-tune", "its price for a budget, and the Pareto front", _router_tune, 10,
          ("router-train",), release=True,
          outputs=lambda out: [_section(out, "router-tune"),
                               *_tuned(_router_run(out))]),
    Stage("router-export", "export the router ONNX (+int8)", _router_export_argv, 40,
          ("router-tune",), outputs=lambda out: _export_files(_router_export(out)),
          release=True),  # its parity and int8 calibration questions are the release's
    Stage("router-evaluate", "every routing policy on the bundle's test split", _router_evaluate,
          20, ("router-export",), outputs=lambda out: [_section(out, "router-evaluate")],
          release=True),
]  # fmt: skip


def upstream(stage: Stage) -> list[str]:
    """The stages whose results `stage` reads, directly or through another, in demo order."""
    by_name = {s.name: s for s in STAGES}
    found: set[str] = set()
    todo = list(stage.reads)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += by_name[name].reads
    return [s.name for s in STAGES if s.name in found]


SAVING = "### Routing: the saving (test)"  # the router report's table the demo leads with


DEMO_BUSY = (
    "another demo (pid {{pid}}) is running in {out}; wait for it to finish, or pass another --out"
)


def run_demo(out: Path, only: str | None = None, force: bool = False) -> int:
    """Runs the stages in order (or just `only`), reusing finished ones; writes the report.
    One demo at a time in a folder: two would train into the same run folder at once."""
    names = [s.name for s in STAGES]
    if only is not None and only not in names:
        raise ConfigError(f"unknown stage {only!r} (--stage); stages: {', '.join(names)}")
    preload.check_setting()
    check_inputs(out)
    refuse_foreign_report(out)
    where = str(out).replace("{", "{{").replace("}", "}}")  # the lock formats in the pid
    # .demo.lock in `out`; the refusal names `out` (it said "runs/demo/demo", no such path)
    with one_writer(out / "demo", DEMO_BUSY.format(out=where), shown=out):
        return _run_stages(out, only, force)


def check_inputs(out: Path) -> None:
    """What the stages read besides the datasets, found before the first stage: the configs
    and committed labels they name (paths from the checkout's root) and the Adaptive-RAG
    release the router's stages read. Missing, the demo stopped at the stage needing them,
    minutes in (run outside the checkout: at train, its fourth)."""
    named = {a for s in STAGES for a in s.argv(out) if a.startswith(("configs/", "data/"))}
    if missing := sorted(p for p in named if not Path(p).exists()):
        raise InputError(f"the demo's stages read {missing[0]} (and the configs and committed "
                         "labels beside it) from the checkout's root: run it there (`make demo`), "
                         f"not from {Path.cwd()}")  # fmt: skip
    if _data_dir() is not None:  # none at all: the data stage says so first
        from .data.adaptive_rag import find_release

        find_release()  # the router's stages read it: its absence named now, not at stage 9


def common_keys() -> tuple[str, str]:
    """What every stage reads (`shared_key`: the code and the data folder), and that with the
    Adaptive-RAG release the router's stages read (`Stage.release`): $RETRIEVAL_GATE_ADAPTIVE_RAG
    may name one outside the data folder."""
    shared = shared_key(_data_dir())
    return shared, f"{shared}\0release {folder_key(_release_dir())}"


def _run_stages(out: Path, only: str | None, force: bool) -> int:
    shared, release = common_keys()
    markers = {s.name: out / MARKER.format(s.name) for s in STAGES}
    for stage in STAGES:  # before the first stage, not as a traceback at the stage's end
        _not_a_folder(markers[stage.name], f"stage {stage.name}'s done marker")
        _not_a_folder(out / f"{stage.name}.work.json", f"stage {stage.name}'s work counters")
        for path in stage.outputs(out):  # a stage would fail on it, or the report read it
            _not_a_folder(path, f"stage {stage.name}'s output")
    for i, stage in enumerate(STAGES, start=1):
        if only is not None and stage.name != only:
            continue
        argv, done = stage.argv(out), markers[stage.name]
        common = release if stage.release else shared
        inputs = inputs_key(argv, common, [markers[n] for n in upstream(stage)], out)
        marker = read_marker(done) if not force and only is None else None
        damage = _damage(stage, out, markers, i) if marker is not None else None
        if marker is not None and marker.get("inputs") == inputs and damage is None:
            print(f"== stage {i}/{len(STAGES)}: {stage.title} (reused, {marker['seconds']:.0f} s)")
            continue
        if marker is not None and marker.get("inputs") == inputs:  # never reused without it
            print(f"note: stage {stage.name}: {damage}: running it again", flush=True)
        elif marker is not None:
            print(f"note: stage {stage.name} ran on other inputs (code, data, its command or "
                  "files, or a stage it reads): running it again", flush=True)  # fmt: skip
        elif done.exists() and not force and only is None:  # said, not re-run without a word
            print(f"note: stage {stage.name}'s marker {done} cannot be read (cut short or "
                  "damaged): running it again", flush=True)  # fmt: skip
        done.unlink(missing_ok=True)  # a re-run stage is unfinished until it ends again
        if force or only is not None:  # asked for: computed anew, not resumed
            for path in stage.fresh(out):
                _not_a_folder(path, f"stage {stage.name}'s output")
                path.unlink(missing_ok=True)
        print(
            f"== stage {i}/{len(STAGES)}: {stage.title} (budget {stage.budget:.0f} s)\n"
            f"$ retrieval-gate {' '.join(argv)}",
            flush=True,
        )
        start = time.perf_counter()
        work_file = out / f"{stage.name}.work.json"
        work_file.unlink(missing_ok=True)
        try:
            code = run_stage(argv, stage.name, stage.budget, work_file, fork=stage.preload)
        except KeyboardInterrupt:
            print(
                f"\ninterrupted in stage {stage.name}: it is not marked done; re-run "
                "`make demo` to resume from it (finished stages are reused)",
                file=sys.stderr,
            )
            return 130
        seconds = time.perf_counter() - start
        if code != 0:
            print(
                f"stage {stage.name} failed (exit {code}); fix it and re-run `make demo` "
                f"(finished stages are reused) or `retrieval-gate demo --stage {stage.name}`"
            )
            return code
        print(f"== stage {stage.name} done in {seconds:.0f} s", flush=True)
        record = {"argv": argv, "seconds": round(seconds, 1), "work": _read_work(work_file),
                  "inputs": inputs, "outputs": output_record(stage.outputs(out), out)}  # fmt: skip
        write_text(done, json.dumps(record) + "\n")
        work_file.unlink(missing_ok=True)
    report = write_report(out)
    print(f"\n{headline(out)}\n{stage_times(out)}\nfull report: {report}")
    return 0


def _damage(stage: Stage, out: Path, markers: dict[str, Path], i: int) -> str | None:
    """Why the files `stage` (the i-th) made are not as it left them (None: they are): each
    as its marker records it, or as a later stage that rewrites it does (tune, metadata.json)."""
    later = [read_marker(markers[s.name]) for s in STAGES[i - 1 :]]
    records = [info.get("outputs", {}) if info is not None else {} for info in later]
    return damaged_output(stage.outputs(out), out, records)


def _not_a_folder(path: Path, what: str) -> None:
    """A folder where the demo keeps a file of its own: an InputError with the fix (it was an
    IsADirectoryError when the demo went to replace the file)."""
    if path.is_dir():
        raise InputError(f"a folder where the demo keeps {what}: move it away or remove it, "
                         "then run the demo again", path)  # fmt: skip


def run_stage(
    argv: list[str], name: str, budget: float, work_file: Path | None = None, fork: bool = False
) -> int:
    """One verb in its own process, its output passed through; past `budget` seconds, a note
    every NOTE_EVERY seconds with the stage's last progress bar and the time it estimates.
    stdout and stderr are read as one stream: Lightning draws its bars on stdout, tqdm and
    vLLM on stderr. The verb writes its work counters to `work_file` when it exits. `fork`:
    forked from this process with torch and transformers imported once, where that is safe
    (`preload.available`), instead of a fresh interpreter."""
    env = dict(os.environ)
    if work_file is not None:
        env[work.WORK_FILE_ENV] = str(work_file)
    proc: subprocess.Popen | preload.ForkedStage
    if fork and preload.available():
        proc = preload.ForkedStage(argv, env)
    else:
        proc = subprocess.Popen(
            preload.fresh_command(argv),  # it dies with the demo, as a forked stage does
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
    tail = OutputTail(proc.stdout)
    start, next_note = time.perf_counter(), budget
    try:
        while proc.poll() is None:
            time.sleep(0.5)
            elapsed = time.perf_counter() - start
            if elapsed > next_note:
                print("\n" + over_budget_note(name, budget, elapsed, tail.text()), flush=True)
                next_note = elapsed + NOTE_EVERY
    except KeyboardInterrupt:
        stop(proc)
        raise
    finally:
        tail.join()
    return proc.returncode


def stop(proc: subprocess.Popen | preload.ForkedStage, grace: float = 10) -> None:
    """After Ctrl-C: a terminal sends it to the stage too, so give it `grace` seconds to exit;
    if only the demo got it (`kill -INT`), pass it on, and terminate a stage that still hangs."""
    steps = [
        (lambda: None, grace),
        (lambda: proc.send_signal(signal.SIGINT), 30),
        (proc.terminate, 10),
    ]
    for act, seconds in steps:
        act()
        try:
            proc.wait(timeout=seconds)
            return
        except subprocess.TimeoutExpired:
            pass
    proc.kill()
    proc.wait()


class OutputTail:
    """Copies a child's output to our stdout as it comes and keeps its last few kilobytes."""

    KEEP = 4096

    def __init__(self, stream) -> None:  # noqa: ANN001 - a binary pipe
        self._stream = stream
        self._buf = b""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        fd = self._stream.fileno()
        while chunk := os.read(fd, 4096):
            sys.stdout.flush()  # our own lines first, then the child's bytes
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            with self._lock:
                self._buf = (self._buf + chunk)[-self.KEEP :]

    def text(self) -> str:
        with self._lock:
            return self._buf.decode(errors="replace")

    def join(self) -> None:
        self._thread.join(timeout=5)


# tqdm's bar: "<desc>: 45%|####   | 270/600 [00:30<00:33, 9.1it/s]"
_BAR = re.compile(r"([^\r\n|]*?):?\s*\d+%\|[^|]*\|\s*(\d+)/(\d+) \[([\d:]+)<([\d:?]+)")


def over_budget_note(name: str, budget: float, elapsed: float, output_tail: str) -> str:
    """Where a stage past its budget is, and its remaining time by its last progress bar."""
    head = f"-- stage {name} is past its {budget:.0f} s budget ({elapsed:.0f} s so far)"
    bars = _BAR.findall(output_tail)
    if not bars:
        lines = [ln.strip() for ln in re.split(r"[\r\n]", output_tail) if ln.strip()]
        last = lines[-1][:160] if lines else "nothing yet"
        return f"{head}; no progress bar yet, last output: {last}"
    desc, n, total, _, left = bars[-1]
    return f"{head}: {desc.strip() or 'progress'} {n}/{total}, about {left} left by its bar"


def stage_times(out: Path) -> str:
    """Seconds per finished stage and their total, as printed at the end."""
    done = [(s.name, read_marker(out / MARKER.format(s.name))) for s in STAGES]
    rows = [(n, float(info["seconds"])) for n, info in done if info is not None]
    total = sum(t for _, t in rows)
    return "stage times: " + ", ".join(f"{n} {t:.0f} s" for n, t in rows) + f"; total {total:.0f} s"


def _data_dir() -> Path | None:
    """The data folder the stages will read (None: they will say why there is none)."""
    from .data import resolve_data_dir
    from .errors import RetrievalGateError

    try:
        return resolve_data_dir(download=False)
    except RetrievalGateError:
        return None


def _release_dir() -> Path | None:
    """The Adaptive-RAG release the router's stages read, as they find it (None: none; they
    will say why)."""
    from .data.adaptive_rag import release_root
    from .errors import RetrievalGateError

    try:
        return release_root()
    except RetrievalGateError:
        return None


def _read_work(path: Path) -> dict[str, int]:
    """The stage's work counters (empty when the verb wrote none, e.g. it failed to start)."""
    try:
        return {k: int(v) for k, v in parse_json(path.read_bytes()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


# REPORT.md's work columns: (header, counter); prefill and decode count computed tokens only
# (what the machine did), the cached LLM calls beside them.
WORK_COLUMNS = [
    ("prefill tokens", "prefill_tokens_computed"),
    ("decode tokens", "decode_tokens_computed"),
    ("LLM calls cached", "llm_calls_cached"),
    ("training examples", "train_examples"),
    ("training tokens", "train_tokens"),
]


def write_report(out: Path) -> Path:
    """One markdown report: stage times, then the reports the stages wrote (evaluation,
    tuning, RAG), each under its own heading."""
    rows = []
    for stage in STAGES:
        info = read_marker(out / MARKER.format(stage.name))
        if info is not None:
            command = f"`retrieval-gate {' '.join(info['argv'])}`"
            counts = info.get("work", {})  # markers of an older demo have no counters
            work_cells = [counts.get(key, 0) for _, key in WORK_COLUMNS]
            rows.append([stage.title, command, info["seconds"], int(stage.budget), *work_cells])
    totals = [sum(r[i] for r in rows) for i in range(4, 4 + len(WORK_COLUMNS))]
    budget = int(sum(s.budget for s in STAGES))
    rows.append(["total", "", sum(r[2] for r in rows), budget, *totals])
    header = ["stage", "command", "wall time (s)", "budget (s)", *(h for h, _ in WORK_COLUMNS)]
    lines = [REPORT_TITLE, "", f"CPU model: {work.cpu_description()}", "",
             markdown_table(header, rows, digits=1)]  # fmt: skip
    saving = saving_table(out)
    if saving:  # the router's saving first: what a gate exists for
        lines += ["", "## The saving: routing Llama-3.1-8B-Instruct's retrieval (test split)",
                  "", SAVING_NOTE, "", saving]  # fmt: skip
    for title, path in _sections(out):
        if text := _read_section(path):
            lines += ["", f"## {title}", "", _demote(text.strip())]
    return write_owned(out / REPORT, "\n".join(lines) + "\n")


REPORT = "REPORT.md"
REPORT_TITLE = "# retrieval-gate demo report"


def refuse_foreign_report(out: Path) -> None:
    """REPORT.md is a common name: one in `out` the demo did not write is refused before the
    first stage, not replaced after the last (`outputs`); one an earlier demo wrote before
    the folder kept a ledger is known by its title."""
    report = out / REPORT
    if report.is_file():
        with open(report, "rb") as f:
            if f.readline().rstrip(b"\r\n") == REPORT_TITLE.encode():
                vouch_for(report)
    refuse_foreign([report], "--out")


SAVING_NOTE = (
    "Each of the bundle's test questions (the seeded 15% of its 3,000, never trained or tuned "
    "on) was answered by Llama-3.1-8B-Instruct with no retrieval, one retrieval and multi-step "
    "retrieval; a policy's accuracy is its chosen strategy's recorded exact match, its cost "
    "the retrievals it pays (0, 1, 3.35). The router was fitted on the train and dev splits and "
    "its budgets are met on their out-of-fold predictions; the accuracy-matching row uses the "
    "cheapest price whose accuracy there reaches always multi-step's."
)


def saving_table(out: Path) -> str:
    """The router stage's saving table (empty before that stage ran)."""
    text = _read_section(_section(out, "router-evaluate"))
    return first_table(text.split(SAVING, 1)[1]) if SAVING in text else ""


def headline(out: Path) -> str:
    """The tables printed at the end: the router's saving, every gate on the test split, and
    the RAG modes."""
    saving = saving_table(out)
    parts = (
        ["## The saving: routing Llama-3.1-8B-Instruct's retrieval", "", saving, ""]
        if saving
        else []
    )
    for title, path in _sections(out):
        table = first_table(_read_section(path))
        if table and title not in ("Threshold tuning", "Router tuning", ROUTER_SECTION):
            parts += [f"## {title}", "", table, ""]
    return "\n".join(parts)


def first_table(markdown: str) -> str:
    """The first markdown table in a document."""
    lines, table = markdown.splitlines(), []
    for line in lines:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    return "\n".join(table)


def _demote(markdown: str) -> str:
    # The stage reports start at "#": nest them under this report's "##" headings.
    return "\n".join(
        "##" + line if line.startswith("#") else line for line in markdown.splitlines()
    )


def _sections(out: Path) -> list[tuple[str, Path]]:
    return [
        ("Evaluation: every gate on the test split", _section(out, "evaluate")),
        ("Threshold tuning", _section(out, "tune")),
        ("Router tuning", _section(out, "router-tune")),
        ("Adaptive RAG on held-out questions", _section(out, "rag")),
        (ROUTER_SECTION, _section(out, "router-evaluate")),
    ]


def _section(out: Path, stage: str) -> Path:
    """The report a stage writes, which REPORT.md copies (one of the stage's `outputs`)."""
    return (
        out
        / {
            "evaluate": "evaluate/report.md",
            "tune": "tune/tune-learned-closed-book.md",
            "router-tune": "router-tune/tune-router-learned-adaptive-rag.md",
            "rag": "rag/rag.md",
            "router-evaluate": "router/report.md",
        }[stage]
    )


def _read_section(path: Path) -> str:
    """A stage's report ("" before the stage ran); a folder in its place is refused by name
    (it was an IsADirectoryError: a re-run of that stage replaces it, once it is moved)."""
    _not_a_folder(path, "a stage's report")
    try:
        return path.read_text(errors="replace")
    except (FileNotFoundError, NotADirectoryError):  # not written, or a file holds its folder
        return ""


ROUTER_SECTION = "Router on Llama-3.1-8B-Instruct's outcomes: every routing policy"
