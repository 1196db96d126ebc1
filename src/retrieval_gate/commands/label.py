"""`retrieval-gate label`: run a label policy (resumable) or summarise the label files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import DataError, InputError
from ..models import SMOLLM2
from .label_engine import add_engine_args, check_ray_flags, ray_engine, ray_options
from .policy_args import add_policy_options, given_options
from .question_args import (
    add_data_dir,
    add_dataset_arg,
    add_question_args,
    questions_from,
    questions_source,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..data import dataset_names
    from ..labelling import POLICIES  # every policy, the RAG loop's included
    from ..labels.selection import EQ_SAMPLE

    p = sub.add_parser("label", help="write retrieval-need labels keyed by question id")
    p.add_argument(
        "--policy",
        choices=tuple(POLICIES),
        help="label policy to run (default: none; required unless --report or --throughput; "
        "docs/label.md): " + "; ".join(f"{n}: {s.help}" for n, s in POLICIES.items()),
    )
    add_dataset_arg(p, "dataset to label (default: popqa triviaqa freshqa toolqa retrievalqa "
                    "+ an EntityQuestions sample)", dataset_names(True))  # fmt: skip
    p.add_argument("--limit", type=int, help="label only the first N questions (default: all)")
    p.add_argument(
        "--generator",
        "--model",  # rag's and serve's spelling ("did you mean --help?")
        dest="generator",
        help=f"model name or folder (default {SMOLLM2}); with --generator-url the server's model "
        "id (default: the one it lists; of several, name one); with --policy outcomes the name "
        "of the LLM whose answers they are",
    )
    p.add_argument(
        "--generator-url",
        nargs="+",
        help="OpenAI-compatible server to label with (e.g. `vllm serve` at "
        "http://host:8000/v1) instead of an in-process engine (default: none, in-process); "
        "several replicas with --engine ray",
    )
    p.add_argument("--backend", default="auto", choices=("auto", "vllm", "transformers"),
                   help="in-process generator: auto = vLLM when installed")  # fmt: skip
    p.add_argument("--eq-sample", type=int, help=f"EntityQuestions questions sampled by "
                   f"relation, 0 = all (default {EQ_SAMPLE})")  # fmt: skip
    p.add_argument("--seed", type=int, help="seed of the EntityQuestions sample (default 0)")
    p.add_argument(
        "--out",
        type=Path,
        help="the label file the policy writes (default data/labels/...); outcomes with "
        "with-retrieval answers make two files: give --labels-dir instead",
    )
    p.add_argument(
        "--labels-dir",
        type=Path,
        help="folder for label files, as <labels-dir>/<generator>/<policy>.jsonl (default "
        "data/labels; required with --questions unless --out is given)",
    )
    add_question_args(p, "questions to label (instead of --dataset)", "--dataset's")
    add_data_dir(p)
    add_policy_options(p)  # one flag per option of a registered policy
    add_engine_args(p)
    p.add_argument("--report", action="store_true", help="print figures from the label files")
    p.add_argument(
        "--relabel",
        action="store_true",
        help="recompute --policy's labels under --criterion from its stored measures "
        "(no generation), in the file --out names, else <labels-dir>/<generator>/<policy>.jsonl",
    )
    p.add_argument(
        "--throughput",
        type=int,
        metavar="N",
        help="measure questions/s of --backend on N RetrievalQA questions (closed-book and "
        "with 5 documents; median of 3) and exit (default: off)",
    )
    from .cache import add_no_cache

    add_no_cache(p)
    p.set_defaults(run=run)


def check_plan(args: argparse.Namespace) -> Any:
    """Every flag and path, before a question is read, a server asked or an engine started;
    the `LabelRequest` of --policy (None without one)."""
    from ..rag.backends import check_engine
    from .plan import check_counts, check_output_dir, check_output_file

    check_counts(args, {"--limit": 1, "--eq-sample": 0, "--throughput": 1})
    if args.relabel and not args.policy:  # else it labelled, or reported, ignoring it
        from ..labels.policy_registry import POLICIES

        names = " / ".join(n for n, s in POLICIES.items() if s.relabel)
        raise InputError(f"--relabel recomputes the labels of --policy's file: pass --policy "
                         f"{names}")  # fmt: skip
    if not args.relabel:  # --relabel refuses the flags it does not read itself, these too
        mode = (
            "--report" if args.report else "--throughput" if args.throughput is not None else None
        )
        if mode:
            _refuse_unread(args, mode, *MODE_READS[mode])
    req = _request(args) if args.policy else None
    for url in args.generator_url or []:
        check_engine(generator_url=url)
    check_ray_flags(args)
    if args.engine == "ray":
        ray_options(args)
    if args.labels_dir:
        _not_a_file_name(args.labels_dir)
        check_output_dir(args.labels_dir, "--labels-dir")
    if args.out:
        # a label file it resumes or refuses by its rows (labels/label_files.py), never replaces
        check_output_file(args.out, "--out", replaces_only_its_own=False)
    return req


def _not_a_file_name(labels_dir: Path) -> None:
    """`--labels x.jsonl` (read as --labels-dir, its prefix) made a folder named x.jsonl."""
    if labels_dir.suffix.lower() in {".jsonl", ".json", ".csv"} and not labels_dir.is_dir():
        raise InputError(f"--labels-dir {labels_dir}: names a folder (label files go into it as "
                         "<generator>/<policy>.jsonl), not a file; to name the label file, pass "
                         f"--out {labels_dir}")  # fmt: skip


def _request(args: argparse.Namespace) -> Any:
    """The policy's request: its flags paired with it and in bounds, its own checks passed."""
    from ..labels.policies import validate_request
    from ..labels.policy_registry import policy_spec, request

    spec = policy_spec(args.policy)
    if args.relabel:  # first: the other checks speak of questions it does not label
        _check_relabel(args, spec)
    _check_selection(args, spec)
    if args.out and args.labels_dir and not spec.reads_closed_book:  # else one was ignored
        raise InputError(f"--out and --labels-dir both say where --policy {spec.name} writes, "
                         "and it reads no closed-book file from a labels folder: pass one of "
                         "them")  # fmt: skip
    shared = {"datasets": args.datasets, "limit": args.limit, "generator": args.generator,
              "backend": args.backend, "out": args.out, "llm": args.llm}  # fmt: skip
    for name in ("eq_sample", "seed"):  # not given: the request's defaults
        if getattr(args, name) is not None:
            shared[name] = getattr(args, name)
    if args.labels_dir:
        shared["labels_dir"] = args.labels_dir
    req = request(args.policy, given_options(args), **shared)
    validate_request(req)
    return req


def _check_relabel(args: argparse.Namespace, spec: Any) -> None:
    """--relabel rewrites the rows already in a label file from their stored measures: a
    policy whose rows keep none, or a flag picking questions (it reads none), is refused."""
    from ..labels.policy_registry import POLICIES

    if not spec.relabel:
        names = ", ".join(n for n, s in POLICIES.items() if s.relabel)
        raise InputError(f"--relabel recomputes labels from the measures a policy's rows keep: "
                         f"it works on {names}, not --policy {spec.name}")  # fmt: skip
    picks = {"--questions": args.questions, "--field": args.field, "--dataset": args.datasets,
             "--limit": args.limit, "--eq-sample": args.eq_sample, "--seed": args.seed}  # fmt: skip
    given = [flag for flag, value in picks.items() if value is not None]
    if given:
        raise InputError(f"{given[0]} picks the questions to label, and --relabel rewrites "
                         "the rows already in the label file (named by --out, or by "
                         "--labels-dir and --generator), reading no questions: "
                         "drop it")  # fmt: skip
    if args.generator_url:
        raise InputError("--generator-url asks a server for answers, and --relabel generates "
                         "none: drop it; --generator NAME names the labels' folder")  # fmt: skip
    _refuse_unread(args, "--relabel", *MODE_READS["--relabel"])


# What each mode besides labelling reads (the flags' dests) and says it reads; every other
# label flag it would ignore (`--report --out FILE` reported data/labels), so it is refused.
MODE_READS: dict[str, tuple[set[str], str]] = {
    "--relabel": (
        {"policy", "relabel", "criterion", "neither_label", "generator", "labels_dir", "out"},
        "recomputes the labels already in the label file from the measures its rows keep, "
        "reading only --policy, --criterion, --neither-label (rag-gain), --out or "
        "--labels-dir, and --generator",
    ),
    "--report": (
        {"report", "labels_dir", "generator", "questions", "field", "data_dir"},
        "prints figures of every label file of --generator under --labels-dir (not one --out "
        "file), over the bundled questions or --questions (--field), reading only those flags "
        "and --data-dir",
    ),
    "--throughput": (
        {"throughput", "backend", "generator", "data_dir"},
        "times --generator on --backend over RetrievalQA questions and writes no label, "
        "reading only those flags and --data-dir",
    ),
}


def _refuse_unread(args: argparse.Namespace, mode: str, reads: set[str], does: str) -> None:
    """A flag `mode` never reads (`--chunk-size`, `--k`, `--backend vllm`, `--out`...), given
    other than its default, is refused: the run would look as if it had applied it."""
    sub = argparse.ArgumentParser(add_help=False).add_subparsers()
    add_parser(sub)  # the flags and their defaults, as `label` declares them
    for action in sub.choices["label"]._actions:
        if action.dest in reads or not action.option_strings:
            continue
        if getattr(args, action.dest, action.default) != action.default:
            flag = action.option_strings[0]
            raise InputError(f"{flag} is not read by {mode}, which {does}: drop {flag}")


def _check_selection(args: argparse.Namespace, spec: Any) -> None:
    """The flags that pick the questions to label, refused where this run reads none of them
    (a policy that labels every row of its input; an EntityQuestions sample of no
    EntityQuestions)."""
    picks = {"--dataset": args.datasets, "--limit": args.limit,
             "--eq-sample": args.eq_sample, "--seed": args.seed}  # fmt: skip
    given = [flag for flag, value in picks.items() if value is not None]
    if given and not spec.selects:
        raise InputError(f"{given[0]} picks the questions to label, and --policy {spec.name} "
                         "labels every row of its input (--outcomes): drop it; to label fewer, "
                         "cut the file")  # fmt: skip
    from ..labels.selection import EQ

    sampled = args.questions is None and (not args.datasets or EQ in args.datasets)
    eq_given = [flag for flag in ("--eq-sample", "--seed") if picks[flag] is not None]
    if eq_given and not sampled:
        mine = (
            "--questions" if args.questions is not None else f"--dataset {' '.join(args.datasets)}"
        )
        raise InputError(f"{eq_given[0]} sets the EntityQuestions sample, and {mine} labels "
                         f"no EntityQuestions: drop it")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    args.llm = args.generator  # as given: a release folder picks its LLM by it
    if not args.generator and not args.generator_url:
        args.generator = SMOLLM2
    req = check_plan(args)
    if args.report:
        from ..labels.label_figures import print_report

        print_report(args.generator, args.labels_dir, questions_from(args))
        return 0
    if args.throughput is not None:
        from ..generation import build_generator
        from ..labels.throughput import throughput

        gen = build_generator(args.generator, args.backend)
        print(json.dumps(throughput(gen, args.throughput), indent=2))
        return 0
    if args.relabel and req is not None:  # loads no model: --generator names the folder
        return _relabel(req)
    from ..generation.model_folders import check_model_folder

    if not args.generator_url:  # a local engine: its folder exists (before any lock or engine)
        check_model_folder(args.generator)
    if req is None:
        raise DataError("pass --policy (or --report); see `retrieval-gate label -h`")
    return _label(args, req)


def _relabel(req: Any) -> int:
    """Relabels the file `label` would write (--out, else under --labels-dir)."""
    from ..labels.policies import relabel

    result = relabel(req.policy, req.value("criterion"), req.generator, req.labels_dir,
                     req.options.get("neither_label"), out=req.out)  # fmt: skip
    print(json.dumps(result, indent=2))
    return 0


def _label(args: argparse.Namespace, req: Any) -> int:
    """Reads the questions, asks the server (or Ray) for the generator, runs the policy."""
    from ..labels.policies import label

    questions = questions_from(args)
    if questions is not None and not (args.out or args.labels_dir):
        raise DataError(
            "--questions: pass --labels-dir DIR (or --out FILE): labels of your own questions "
            "do not go into the project's data/labels"
        )
    if questions is not None and args.datasets:
        raise DataError("pass --questions or --dataset, not both")
    generator = ray_engine(args, questions) if args.engine == "ray" else _remote(args, questions)
    req.questions = questions
    if questions is not None:
        req.questions_source = questions_source(args.questions, args.field)
    if generator is not None:  # the server's model id names the label folder
        req.generator = generator.name
    print(json.dumps(label(req, generator=generator), indent=2))
    return 0


def _remote(args: argparse.Namespace, questions: Any) -> Any:
    """The server's generator for --generator-url, checked before any labelling starts."""
    if not args.generator_url:
        return None
    from ..labels.policies import check_answers
    from ..labels.policy_registry import policy_spec
    from ..rag.backends import open_generator  # the key, the cache: as rag's and serve's

    if not policy_spec(args.policy).needs_generator:
        raise DataError(
            f"--generator-url generates answers: it does not apply to --policy {args.policy}"
        )
    if len(args.generator_url) > 1:
        raise DataError("several --generator-url replicas are spread by --engine ray")
    if questions is not None:
        check_answers(questions, args.policy)  # before contacting the server
    return open_generator(generator_url=args.generator_url[0], model=args.generator)
