"""`retrieval-gate rag`: several gates through the same vLLM RAG loop, side by side."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..data import dataset_names, format_table
from ..errors import ConfigError
from ..gates.onnx_format import VARIANTS
from ..gates.registry import needing
from ..outputs import write_owned
from ..rag.loop import DEFAULT_K, DEFAULT_MAX_NEW_TOKENS
from ..rag.modes import (
    DEFAULT_MODES,
    FIRST_GATE,
    MULTI_STEP_MODE,
    ORACLE,
    ModeOptions,
    known_modes,
    parse_thresholds,
)
from ..rag.multistep import DEFAULT_MAX_STEPS, MAX_STEPS_LIMIT, MultiStepConfig
from ..rag.sample import SPLITS
from ..retrieval import RETRIEVERS
from ..strategies import BUILTIN, StrategyRegistry
from .gate_args import add_gate_options, check_threshold, gate_options
from .plan import Distinct, check_at_most, check_output_file, gpu_count
from .question_args import add_data_dir, add_dataset_arg, add_question_args, questions_from

# The modes `rag` runs unless --modes says otherwise (every registry gate and oracle is known).
# (multi-step and router are asked for by name: --modes never always multi-step router ...)


def add_generator_args(p: argparse.ArgumentParser) -> None:
    """Generator and retriever flags shared with `retrieval-gate serve`."""
    g = p.add_argument_group("generation and retrieval")
    add_retrieval_args(g)
    g.add_argument(
        "--max-new-tokens",
        type=int,
        default=DEFAULT_MAX_NEW_TOKENS,
        help="tokens per answer, and per multi-step reasoning step",
    )
    add_multi_step_args(p)
    # --generator too, label's spelling: as a prefix of --generator-url it was read as a URL
    g.add_argument("--model", "--generator", dest="model",
                   help="generator model folder or name (default: SmolLM2-135M)")  # fmt: skip
    g.add_argument(
        "--generator-url",
        help="OpenAI-compatible server to generate with instead of an in-process engine, "
        "e.g. http://localhost:8000/v1 (`vllm serve` with its own parallelism flags; default: "
        "none, in-process)",
    )
    g.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM tensor parallelism")
    g.add_argument(
        "--data-parallel-size",
        type=int,
        default=1,
        help="vLLM data parallelism (a vLLM server's flag: use with --generator-url)",
    )


def add_retrieval_args(g: argparse._ActionsContainer) -> None:
    """What a mode that retrieves reads (`_retrieval_read`: unused by modes that never do)."""
    g.add_argument(
        "--retriever", choices=RETRIEVERS, default="bm25", help="default bm25 (as the labels)"
    )
    g.add_argument(
        "--corpus",
        help="corpus for bm25/dense: rows of {id, title, text} in .jsonl, .json, .csv, .tsv or "
        ".parquet (default: the datasets' documents)",
    )
    # --k too: label's spelling of the same count (`rag --k 3` was an unknown flag)
    g.add_argument(
        "-k", "--k", type=int, default=DEFAULT_K, help="documents per retrieved question"
    )


def add_multi_step_args(p: argparse.ArgumentParser) -> None:
    """The multi-step strategy's flags (shared with `serve` and `label --policy strategies`)."""
    g = p.add_argument_group("multi-step retrieval (IRCoT)")
    g.add_argument(
        "--max-steps",
        type=int,
        default=DEFAULT_MAX_STEPS,
        help=f"LLM calls per multi-step question, 1-{MAX_STEPS_LIMIT}; the last one asks for "
        f"the answer (default {DEFAULT_MAX_STEPS})",
    )
    g.add_argument(
        "--max-docs",
        type=int,
        help="documents a multi-step question holds, newest kept (default: -k)",
    )
    g.add_argument(
        "--step-k", type=int, help="documents per retrieval after the first (default: k // 2)"
    )


def multi_step_config(args: argparse.Namespace) -> MultiStepConfig:
    """The multi-step settings, checked (before any engine starts)."""
    config = MultiStepConfig(args.max_steps, args.max_docs, args.step_k)
    config.check()
    return config


def given_flags(args: argparse.Namespace, add_args: Any) -> list[str]:
    """The flags `add_args` declares that `args` sets to other than their default."""
    declared = argparse.ArgumentParser(add_help=False)
    add_args(declared)  # the flags and their defaults, as the verb declares them
    return [a.option_strings[-1] for a in declared._actions
            if getattr(args, a.dest, a.default) != a.default]  # fmt: skip


def check_multi_step_read(
    args: argparse.Namespace, modes: Sequence[str], strategies: StrategyRegistry
) -> None:
    """The multi-step flags go with a mode that can run a multi-step strategy (the
    multi-step mode, a router, or a multi-step strategy's fixed mode), --max-steps with one
    whose strategy sets no `max_steps:` of its own; given to others, they went unused."""
    reads = [m for m in modes if m in (MULTI_STEP_MODE, *FIRST_GATE)
             or (m in strategies and strategies[m].multi_step)]  # fmt: skip
    # a strategy's own max_steps: wins over the flag (`AdaptiveRAG.steps_config`)
    steps = [m for m in reads if not (m in strategies and strategies[m].max_steps is not None)]
    given = given_flags(args, add_multi_step_args)
    if "--max-steps" in given and reads and not steps:
        raise ConfigError(f"--max-steps sets the multi-step strategy's LLM calls, and every "
                          f"multi-step mode of this run sets its own (max_steps: of "
                          f"{', '.join(reads)} in {strategies.source}): drop it, or edit the "
                          "file")  # fmt: skip
    if given and not reads:
        raise ConfigError(f"{given[0]} sets the multi-step strategy, and no mode of this run "
                          f"runs it ({' '.join(modes)}): drop it, or add the multi-step mode, "
                          "a router or a multi-step strategy")  # fmt: skip


def add_gate_args(p: argparse.ArgumentParser) -> None:
    """The gate flags (shared with every verb that takes gates), plus the label files the
    fitted gates and the oracle read, and threshold overrides (shared with `serve`)."""
    add_gate_options(p)
    g = p.add_argument_group("labels and thresholds")
    g.add_argument("--labels", type=Path, help="label file fitting popularity / TA-ARE / tfidf "
                   "(default: the bundled SmolLM2 closed-book labels)")  # fmt: skip
    g.add_argument("--oracle-labels", type=Path, help="label file the oracle follows (default: "
                   "the bundled SmolLM2 rag-gain labels)")  # fmt: skip
    g.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="MODE=VALUE",
        help="override a mode's threshold (repeatable; default: each gate's own)",
    )
    g = p.add_argument_group("routing between strategies")
    g.add_argument(
        "--router",
        type=Path,
        metavar="DIR",
        help="a router export (no retrieval / one retrieval / multi-step); a binary gate "
        "export picks between the first two (default: none; required by the router mode)",
    )
    g.add_argument(
        "--budget",
        type=float,
        help="the router's budget: mean cost per question in its unit (default: its own)",
    )
    g.add_argument(
        "--answer-gate",
        type=Path,
        metavar="DIR",
        help="the cascade mode's two-stage gate export (`train --config cascade-closed-book`): "
        "it reads the closed-book answers of the questions --router keeps closed-book and "
        "escalates the unsure ones; `serve --mode gate`: the answers' token_logprobs /score "
        "requests send (default: none; required by the cascade mode)",
    )
    g.add_argument(
        "--router-variant",
        choices=tuple(VARIANTS),
        default="fp32",
        help="the router export's ONNX file (default fp32; int8 decides about 1.5x faster on a "
        "CPU: check its routes in the export's parity.json first)",
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rag", help="answer questions through gate -> retriever -> vLLM, per mode, with costs"
    )
    add_dataset_arg(
        p, "dataset to sample from (default: the default set)", dataset_names(True), "dataset"
    )
    p.add_argument("--split", choices=SPLITS, default="test", help="canonical split")
    p.add_argument("--limit", type=sample_size, default=200,
                   help="seeded sample size, or `all` (default: 200)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument(
        "--with-contexts", action="store_true", help="only questions with their own documents"
    )
    p.add_argument(
        "--modes",
        nargs="+",
        action=Distinct,
        default=list(DEFAULT_MODES),
        metavar="MODE",
        help=f"any of: {' '.join(known_modes())}, and every strategy a --strategies file "
        f"declares (default: {' '.join(DEFAULT_MODES)})",
    )
    p.add_argument(
        "--out",
        type=str,  # as typed: a trailing slash (a folder) is refused, and a Path drops it
        help="file name of the table (.md) and results (.json); each mode is saved as it "
        "finishes (.modes.jsonl) and a rerun with the same inputs resumes from there (a .md or "
        ".json suffix is replaced, any other kept; default: print only)",
    )
    add_question_args(p)
    add_data_dir(p)
    add_generator_args(p)
    add_gate_args(p)
    from .cache import add_no_cache

    add_no_cache(p)
    p.set_defaults(run=run)


def generator_kwargs(args: argparse.Namespace) -> dict:
    """The engine's options, checked (before any engine starts): counts, the model folder,
    the server URL, and no more tensor-parallel ranks than this machine has GPUs."""
    from ..rag.backends import check_engine

    for flag in ("k", "max_new_tokens"):
        value = getattr(args, flag)
        if value < 1:
            name = "-k" if flag == "k" else "--" + flag.replace("_", "-")
            raise ConfigError(f"{name} must be at least 1, got {value}")
    engine = {
        "generator_url": args.generator_url,
        "model": args.model,
        "tensor_parallel_size": args.tensor_parallel_size,
        "data_parallel_size": args.data_parallel_size,
    }
    check_engine(**engine)
    if not args.generator_url and args.tensor_parallel_size > 1:  # the in-process engine's GPUs
        gpus = gpu_count()
        check_at_most("--tensor-parallel-size", args.tensor_parallel_size, max(1, gpus),
                      f"this machine has {gpus} GPU(s) for the in-process engine (or generate "
                      "through a server: --generator-url)")  # fmt: skip
    return engine


def sample_size(text: str) -> int:
    """`--limit N` (N >= 1) or `--limit all` (0 inside: every question). A 0 ran every
    question, where `label` and `evaluate` refuse it: `all` says so on purpose."""
    if text.strip().lower() == "all":
        return 0
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of questions or 'all', got "
                                         f"{text!r}") from None  # fmt: skip
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 question, got {n} (every "
                                         "question: --limit all)")  # fmt: skip
    return n


def mode_options(args: argparse.Namespace, modes: Sequence[str]) -> ModeOptions:
    """The gate flags of `modes` as options, checked: every --threshold names one of them."""
    thresholds = parse_thresholds(args.threshold)
    for mode, value in thresholds.items():
        check_threshold(value, f"--threshold {mode}")
        if mode not in modes:
            raise ConfigError(f"--threshold {mode}={value}: {mode!r} is not a mode of this run "
                              f"({', '.join(modes)})")  # fmt: skip
    opts = ModeOptions(**vars(gate_options(args, modes)), thresholds=thresholds, router=args.router,
                       budget=args.budget, router_variant=args.router_variant,
                       answer_gate=getattr(args, "answer_gate", None),
                       strategies=args.strategies or BUILTIN, retriever=args.retriever)  # fmt: skip
    _labels_read(args, modes)
    check_multi_step_read(args, modes, opts.strategies)
    _retrieval_read(args, modes, opts.strategies)
    if args.labels:
        opts.labels = args.labels
    if args.oracle_labels:
        opts.oracle_labels = args.oracle_labels
    opts.questions = questions_from(args) if hasattr(args, "questions") else None  # not serve
    if opts.questions is not None and args.labels:  # your labels' folder holds your outcomes
        opts.run_dir = args.labels.parent
    return opts


def _labels_read(args: argparse.Namespace, modes: Sequence[str]) -> None:
    """--labels and --oracle-labels go with the modes that read them (given to others, they
    went unused: even a missing file passed)."""
    questions = getattr(args, "questions", None)  # with them, --labels' folder is the run's
    if args.labels and not needing("labels", modes) and not questions:
        raise ConfigError(f"--labels fits the gates that learn from labels (popularity, "
                          f"tfidf, prompt-ta-are, ...), and this run has none ({' '.join(modes)})"
                          ": drop it, or add the gate")  # fmt: skip
    if args.oracle_labels and ORACLE not in modes:
        raise ConfigError(f"--oracle-labels goes with the {ORACLE} mode, which this run does "
                          f"not have ({' '.join(modes)}): drop it, or add the mode")  # fmt: skip


def _retrieval_read(args: argparse.Namespace, modes: Sequence[str],
                    strategies: StrategyRegistry) -> None:  # fmt: skip
    """-k, --retriever and --corpus go with a mode that can retrieve; given to a run whose
    modes never do (`never`, a strategy retrieving nothing), they went unused, and the report
    named them as its setup. -k, likewise, goes with a mode whose strategy sets no `k:` of its
    own (the strategy's wins: `StrategySpec.documents`)."""
    closed = [m for m in modes
              if m == "never" or (m in strategies and not strategies[m].retrieves)]  # fmt: skip
    given = given_flags(args, add_retrieval_args)
    if given and len(closed) == len(modes):
        raise ConfigError(f"{given[0]} sets the retrieval, and no mode of this run retrieves "
                          f"({' '.join(modes)}): drop it, or add a mode that "
                          "retrieves")  # fmt: skip
    own = [m for m in modes if m not in closed and m in strategies and strategies[m].k]
    if "--k" in given and own and len(closed) + len(own) == len(modes):
        raise ConfigError(f"-k sets the documents per retrieved question, and every mode of "
                          f"this run that retrieves sets its own (k: of {', '.join(own)} in "
                          f"{strategies.source}): drop it, or edit the file")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from .interrupts import not_waiting_on_threads

    with not_waiting_on_threads():  # the saved modes stay; held requests are not waited for
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from ..fileio import one_writer, writer_busy
    from ..rag.experiment import Pipeline, check_progress_file

    if args.out:  # before the run, not after it
        args.out = _out_stem(args.out)
        for path in (_out_file(args.out, ".md"), _out_file(args.out, ".json")):
            check_output_file(path, "--out")
        check_output_file(_progress(args), "--out", replaces_only_its_own=False)
    engine = generator_kwargs(args)
    pipeline = Pipeline(args.retriever, args.corpus, args.k, args.max_new_tokens,
                        multi_step_config(args))  # fmt: skip
    options = mode_options(args, args.modes)
    if not args.out:
        return _compare(args, engine, pipeline, options)
    # every flag checked: one run appends to the progress file at a time (two would interleave)
    with one_writer(_progress(args), writer_busy("rag run", "--out", args.out)):
        check_progress_file(_progress(args))
        return _compare(args, engine, pipeline, options)


def _out_stem(out: str | Path) -> Path:
    """--out as the files' stem. A path without a name (`.`, `..`, `/`) or a folder was a
    traceback, or `...md` written beside it; a folder-to-be (`new/`: a trailing slash, which a
    Path drops) had `new.md` written beside it."""
    path = Path(out)
    if str(out)[-1:] in ("/", os.sep) or path.name in ("", ".", "..") or path.is_dir():
        raise ConfigError(f"--out {out} names a folder, and --out is the report's file name "
                          f"(its .md, .json and .modes.jsonl are written beside it): pass a "
                          f"file name, e.g. --out {path / 'report'}")  # fmt: skip
    return path


def _out_file(out: Path, suffix: str) -> Path:
    """One of --out's files: a `.md` or `.json` of its own is replaced, any other dot is part
    of the name (`--out r1/run3.v2` wrote run3.md and resumed run3.modes.jsonl, another
    --out's)."""
    stem = out.with_suffix("") if out.suffix in (".md", ".json") else out
    return stem.with_name(stem.name + suffix)


def _progress(args: argparse.Namespace) -> Path:
    """Each mode's result as it finishes, appended: the folder's ledger says it is ours."""
    return _out_file(args.out, ".modes.jsonl")


def _compare(args: argparse.Namespace, engine: dict, pipeline: Any, options: ModeOptions) -> int:
    from ..cache_settings import cache_enabled
    from ..rag.experiment import Sample, run_comparison

    # without the generation cache (--no-cache) costs are measured now: no saved mode is kept
    report = run_comparison(
        args.modes,
        Sample(args.dataset, args.split, args.limit, args.seed, args.with_contexts),
        pipeline,
        mode_options=options,
        engine=engine,
        progress_file=_progress(args) if args.out else None,
        resume=cache_enabled(),
    )
    print(format_table(report["table"]))
    print(report["note"])
    if args.out:
        table = format_table(report["table"]) + "\n\n" + report["note"] + "\n"
        md, full = _out_file(args.out, ".md"), _out_file(args.out, ".json")
        write_owned(md, table)
        write_owned(full, json.dumps(report, indent=1, default=str))
        print(f"wrote {md} and {full}")
    return 0
