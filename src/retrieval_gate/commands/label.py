"""`retrieval-gate label`: run a label policy (resumable) or summarise the label files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..data.errors import DataError
from ..models import SMOLLM2
from .label_engine import add_engine_args, ray_engine, ray_options
from .question_args import add_data_dir, add_dataset_arg, add_question_args, questions_from
from .rag import add_multi_step_args, multi_step_config

STRATEGIES_POLICY = "strategies"  # runs the RAG loop's strategies: rag/labelling.py


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..data import dataset_names
    from ..labels.policies import POLICIES
    from ..labels.scoring import CRITERIA, DEFAULT_CRITERION
    from ..labels.selection import EQ_SAMPLE

    p = sub.add_parser("label", help="write retrieval-need labels keyed by question id")
    p.add_argument(
        "--policy",
        choices=(*POLICIES, STRATEGIES_POLICY),
        help="label policy to run (default: none; required unless --report or --throughput; "
        "strategies: your generator's outcome under no retrieval, one retrieval and "
        "multi-step retrieval, docs/label.md)",
    )
    add_dataset_arg(p, "dataset to label (default: popqa triviaqa freshqa toolqa retrievalqa "
                    "+ an EntityQuestions sample)", dataset_names(True))  # fmt: skip
    p.add_argument("--limit", type=int, help="label only the first N questions (default: all)")
    p.add_argument(
        "--generator",
        help=f"model name or folder (default {SMOLLM2}); with --generator-url the server's model "
        "id (default: the first it lists); with --policy outcomes the name of the LLM whose "
        "answers they are",
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
    p.add_argument("--criterion", default=DEFAULT_CRITERION, choices=CRITERIA,
                   help="when an answer counts as correct (docs/label.md)")  # fmt: skip
    p.add_argument(
        "--chunk-size",
        type=int,
        help="questions per generator call (default 512; --policy strategies: 64, each under "
        "every strategy, written when the chunk ends)",
    )
    p.add_argument("--eq-sample", type=int, default=EQ_SAMPLE, help="EntityQuestions sample")
    p.add_argument("--seed", type=int, default=0, help="seed of the EntityQuestions sample")
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
    p.add_argument(
        "--outcomes",
        type=Path,
        help="--policy outcomes (required there; default: none): your recorded answers (lm-eval --log_samples samples_*.jsonl, "
        "or a file with id/question + correct or prediction [+ rag_correct/rag_prediction]), "
        "or an Adaptive-RAG release folder (predictions/<split>/; --generator picks its LLM)",
    )
    p.add_argument(
        "--strategies",
        nargs="+",
        help="--policy outcomes: strategy names in cost order, the cheapest first; the file "
        "has <name>_correct or <name>_prediction (and optionally <name>_cost) columns; also "
        "writes strategies.jsonl (docs/label.md; default: none, one-answer outcomes). "
        "--policy strategies: which of no_retrieval one_retrieval multi_step to run "
        "(default all three), or a strategies FILE.yaml (docs/router.md) to run its strategies",
    )
    p.add_argument(
        "--unanswered",
        help="strategy labels: target of questions no strategy answers: prior (default; "
        "single-hop sets -> one retrieval, multi-hop -> multi-step, any other source -> the "
        "strategy most often right on its labelled questions; prior:SOURCE=STRATEGY,... sets "
        "sources), exclude, or a strategy name",
    )
    g = p.add_argument_group("rag-gain and rrcp")
    g.add_argument("--retriever", choices=("bm25", "dense", "contexts"), default="bm25",
                   help="documents for the with-retrieval answers")  # fmt: skip
    g.add_argument(
        "--corpus",
        type=Path,
        help="JSONL of {id, title, text} (default: the documents the datasets carry)",
    )
    g.add_argument("--k", type=int, help="documents per question (default 5)")
    g.add_argument(
        "--neither-label",
        type=int,
        choices=(0, 1),
        help="rag-gain: label for 'neither' (default: dropped)",
    )
    g.add_argument("--evaluator", choices=("overlap", "llm", "mean"),
                   help="rrcp s_i evaluator (default: the policy's, overlap)")  # fmt: skip
    g.add_argument("--no-llm-judge", action="store_true", help="rrcp: skip the P(Yes) judge")
    g.add_argument("--t-ans", type=float, help="rrcp answerability threshold (default 0.15)")
    g.add_argument("--t-com", type=float, help="rrcp completeness threshold (default 0.80)")
    add_engine_args(p)
    add_multi_step_args(p)
    p.add_argument("--report", action="store_true", help="print figures from the label files")
    p.add_argument(
        "--relabel",
        action="store_true",
        help="recompute --policy's labels under --criterion from its stored measures "
        "(no generation)",
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


def check_plan(args: argparse.Namespace) -> None:
    """Every flag and path, before a question is read, a server asked or an engine started."""
    from ..rag.backends import check_engine
    from .gate_args import check_threshold
    from .plan import check_counts, check_input_file, check_output_dir, check_output_file

    check_counts(args, {"--limit": 1, "--chunk-size": 1, "--eq-sample": 0, "--k": 1,
                        "--throughput": 1})  # fmt: skip
    check_threshold(args.t_ans, "--t-ans")
    check_threshold(args.t_com, "--t-com")
    multi_step_config(args)
    for url in args.generator_url or []:
        check_engine(generator_url=url)
    if args.engine == "ray" and args.policy != STRATEGIES_POLICY:  # that one says why not
        ray_options(args)
    if args.labels_dir:
        check_output_dir(args.labels_dir, "--labels-dir")
    if args.out:
        check_output_file(args.out, "--out")
    check_input_file(args.corpus, "--corpus", "pass a JSONL file of {id, title, text}")
    if args.outcomes and not args.outcomes.exists():
        raise DataError("--outcomes: no such file or folder; pass your recorded answers or an "
                        "Adaptive-RAG release folder", args.outcomes)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    args.llm = args.generator  # as given: a release folder picks its LLM by it
    if not args.generator and not args.generator_url:
        args.generator = SMOLLM2
    check_plan(args)
    if args.report:
        from ..labels.label_figures import print_report

        print_report(args.generator)
        return 0
    if args.throughput is not None:
        from ..generation import build_generator
        from ..labels.throughput import throughput

        gen = build_generator(args.generator, args.backend)
        print(json.dumps(throughput(gen, args.throughput), indent=2))
        return 0
    from ..generation.models import check_model_folder
    from ..labels.policies import LabelRequest, label

    if not args.generator_url:  # a local engine: its folder exists (before any lock or engine)
        check_model_folder(args.generator)
    if not args.policy:
        raise DataError("pass --policy (or --report); see `retrieval-gate label -h`")
    if args.policy == STRATEGIES_POLICY:
        return _strategies(args)
    if args.relabel:
        from ..labels.policies import relabel

        result = relabel(
            args.policy, args.criterion, args.generator, neither_label=args.neither_label
        )
        print(json.dumps(result, indent=2))
        return 0
    questions = questions_from(args)
    if questions is not None and not (args.out or args.labels_dir):
        raise DataError(
            "--questions: pass --labels-dir DIR (or --out FILE): labels of your own questions "
            "do not go into the project's data/labels"
        )
    if bool(args.outcomes) != (args.policy == "outcomes"):
        raise DataError("--outcomes FILE and --policy outcomes go together")
    if questions is not None and args.datasets:
        raise DataError("pass --questions or --dataset, not both")
    generator = ray_engine(args, questions) if args.engine == "ray" else _remote(args, questions)
    req = LabelRequest(
        policy=args.policy,
        datasets=args.datasets,
        limit=args.limit,
        generator=generator.name if generator else args.generator,
        backend=args.backend,
        criterion=args.criterion,
        chunk_size=512 if args.chunk_size is None else args.chunk_size,
        eq_sample=args.eq_sample,
        seed=args.seed,
        out=args.out,
        options=_policy_options(args),
        questions=questions,
        **({"labels_dir": args.labels_dir} if args.labels_dir else {}),
    )
    print(json.dumps(label(req, generator=generator), indent=2))
    return 0


def _remote(args: argparse.Namespace, questions) -> object | None:
    """The server's generator for --generator-url, checked before any labelling starts."""
    if not args.generator_url:
        return None
    from ..generation.remote import RemoteGenerator
    from ..labels.policies import GENERATOR_POLICIES, check_answers

    if args.policy not in GENERATOR_POLICIES:
        raise DataError(
            f"--generator-url generates answers: it does not apply to --policy {args.policy}"
        )
    if len(args.generator_url) > 1:
        raise DataError("several --generator-url replicas are spread by --engine ray")
    if questions is not None:
        check_answers(questions, args.policy)  # before contacting the server
    from ..generation.cache import cached

    return cached(RemoteGenerator(args.generator_url[0], model=args.generator))


def _policy_options(args: argparse.Namespace) -> dict:
    opts = {"retriever": args.retriever, "corpus": args.corpus, "k": args.k}
    if args.policy in ("rag-gain", "outcomes"):
        opts["neither_label"] = args.neither_label
    if args.policy == "outcomes":
        opts.update(outcomes=args.outcomes, strategies=_strategy_names(args.strategies),
                    llm=args.llm, unanswered=args.unanswered)  # fmt: skip
    elif args.strategies or args.unanswered:
        from ..data.errors import InputError

        raise InputError("--strategies and --unanswered go with --policy outcomes")
    if args.policy == "rrcp":
        opts.update(evaluator=args.evaluator, t_ans=args.t_ans, t_com=args.t_com)
        if args.no_llm_judge:
            opts["llm_judge"] = False
    return opts


def _strategy_names(value: list[str] | None) -> list[str] | None:
    """--strategies as names: given ones, or a strategies FILE.yaml's (cost order)."""
    from ..strategies import load_strategies, registry_names

    strategies_file, names = registry_names(value)
    return list(load_strategies(strategies_file).names) if strategies_file else names


def _strategies(args: argparse.Namespace) -> int:
    """`--policy strategies`: every flag and file checked, then the RAG loop's labelling."""
    from ..data.errors import InputError
    from ..labels.files import LABELS_DIR
    from ..labels.policies import generator_dir_name
    from ..rag.labelling import StrategyLabelling, label_path, label_strategies

    for flag, bad in (("--outcomes", args.outcomes), ("--relabel", args.relabel),
                      ("--engine ray", args.engine == "ray"), ("--out with --labels-dir",
                      args.out and args.labels_dir)):  # fmt: skip
        if bad:
            raise InputError(f"{flag} does not go with --policy {STRATEGIES_POLICY} (it runs "
                             "one engine, or --generator-url, and writes one file)")  # fmt: skip
    from ..strategies import BUILTIN, load_strategies, registry_names

    strategies_file, names = registry_names(args.strategies)  # names, or FILE.yaml
    registry = load_strategies(strategies_file) if strategies_file else BUILTIN
    multi = multi_step_config(args)
    req = StrategyLabelling(
        [], args.out, args.generator, args.retriever, args.corpus,
        5 if args.k is None else args.k, names, multi_step=multi, criterion=args.criterion,
        unanswered=args.unanswered, chunk_size=64 if args.chunk_size is None else args.chunk_size,
        registry=registry,
    )  # fmt: skip
    req.check()  # every flag before the questions are read, the corpus loaded or an engine started
    req.questions = _strategy_questions(args)
    remote = _remote_one(args)  # the server is asked its model id only now
    req.generator = remote.name if remote else args.generator
    req.out = args.out or label_path(
        args.labels_dir or LABELS_DIR, generator_dir_name(req.generator)
    )

    def generator():  # noqa: ANN202
        from ..generation.cache import cached, lazy_generator

        return cached(remote) if remote else lazy_generator(args.generator, args.backend)

    def retriever():  # noqa: ANN202
        from ..rag.backends import open_retriever

        return open_retriever(args.retriever, str(args.corpus) if args.corpus else None)

    print(json.dumps(label_strategies(req, generator, retriever), indent=2))
    return 0


def _strategy_questions(args: argparse.Namespace) -> list:
    from ..labels.selection import labelling_questions

    questions = questions_from(args)
    if questions is not None and args.datasets:
        raise DataError("pass --questions or --dataset, not both")
    if questions is not None and not (args.out or args.labels_dir):
        raise DataError("--questions: pass --labels-dir DIR (or --out FILE): labels of your "
                        "own questions do not go into the project's data/labels")  # fmt: skip
    if questions is None:  # the bundled sets: those with gold answers (and documents)
        questions = labelling_questions(args.datasets, args.eq_sample, args.seed)
        questions = [q for q in questions if q.answers]
        if args.retriever == "contexts":  # only questions that carry their own documents
            questions = [q for q in questions if q.contexts]
    if args.limit is not None and args.limit < 1:
        raise DataError(f"--limit must be a positive number of questions, got {args.limit}")
    missing = [q for q in questions if not q.answers]
    if missing:
        raise DataError(f"{len(missing)} questions have no gold answers (e.g. {missing[0].id!r}) "
                        "to judge the strategies' answers against; add an answers column")  # fmt: skip
    return list(questions)[: args.limit] if args.limit else list(questions)


def _remote_one(args: argparse.Namespace) -> object | None:
    if not args.generator_url:
        return None
    from ..generation.remote import RemoteGenerator

    if len(args.generator_url) > 1:
        raise DataError("--policy strategies takes one --generator-url")
    return RemoteGenerator(args.generator_url[0], model=args.llm)
