"""`retrieval-gate train --config configs/experiments/minilm-closed-book.yaml [--set k=v ...]`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .override_flags import RepeatableOverrides
from .question_args import add_data_dir

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a learned gate (PyTorch Lightning)")
    p.add_argument(
        "--config",
        required=True,
        help="YAML config: a path, or an example config by name (minilm-closed-book, "
        "minilm-lora, ...: configs/experiments, configs/backbones)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        nargs="+",
        action=RepeatableOverrides,
        default=[],
        metavar="KEY=VALUE",
        help="override config keys, e.g. --set trainer.max_epochs=1 data.max_train_examples=2000 "
        "(default: none)",
    )
    again = p.add_mutually_exclusive_group()
    again.add_argument(
        "--overwrite", action="store_true", help="replace the run already in the run folder"
    )
    again.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in the run folder from its last checkpoint (same config only)",
    )
    add_data_dir(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..strict_rows import check_overrides
    from ..training.config import load_config

    check_overrides(args.overrides or ())
    config = load_config(args.config, args.overrides)
    check_labels(config)  # before Lightning, transformers and the model code load
    name_note(args.overrides, config.run.name)
    unread_note(args.overrides, config)
    from ..training.launch import launcher_trainer
    from ..training.trainer import train

    # torchrun / srun: DDP across the launched processes
    config = dataclasses.replace(config, trainer=launcher_trainer(config.trainer))
    run = train(config, overwrite=args.overwrite, resume=args.resume)
    print(f"run folder: {run.path}")
    print("test:", json.dumps({k: round(v, 4) for k, v in run.metrics["test"].items()}))
    return 0


def name_note(overrides: Sequence[str] | None, name: str) -> None:
    """A config trained on other labels keeps the config's run name, which the export and its
    model card carry (`router-adaptive-rag-llama8b` for another LLM's router): say so."""
    keys = {item.split("=", 1)[0].strip() for item in overrides or ()}
    if "data.label_file" in keys and "run.name" not in keys:
        log.info(f"the run is named {name!r} after the config, and its export and model card "
                 "will be: name it after your labels with --set run.name=NAME")  # fmt: skip


def unread_note(overrides: Sequence[str] | None, config: Any) -> None:
    """--set keys the config's head never reads (a stacked head's learning rate, epochs,
    early stopping) changed nothing: said, as the run trains the same without them."""
    from ..training.config import unread_keys

    keys = unread_keys(config, (item.split("=", 1)[0].strip() for item in overrides or ()))
    if keys:
        log.warning(f"{', '.join(keys)} {'is' if len(keys) == 1 else 'are'} not read by "
                    "model.head=stacked (fitted in closed form on the frozen body: no "
                    "optimizer, epochs or early stopping); a linear-head config reads "
                    "them")  # fmt: skip


def check_labels(config: Any) -> None:
    """`data.label_file` read as the task reads it, and laid on its questions' split (a missing
    file, a row that is not one of the task's labels, ids of other data, a split left without
    labels, a dev split of one class under an AUROC or AP monitor, a recorded answer
    log-probability that is none: refused naming the file and row, in seconds); a router's
    costs and budget against the file's strategies (they were checked once training had
    ended). Labels handed in memory (the Python API) are checked by `train` itself."""
    from ..pricing import check_budget
    from ..training.sources import (
        check_answer_logprobs,
        check_monitor,
        check_splits,
        labelled_questions,
    )

    data = config.data
    if not data.label_file:
        raise ConfigError("config needs data.label_file (e.g. --set data.label_file=PATH)")
    targets, rows, _ = labelled_questions(data)
    check_splits(rows, Path(data.label_file))
    check_monitor(rows, config, Path(data.label_file))
    check_answer_logprobs(data)
    if targets.strategies:
        train_ids = [row[0] for row in rows.get("train", ())]
        costs = config.router_costs(targets.strategies, targets.costs, train_ids)
        check_budget(config.model.budget, costs, "model.budget")
