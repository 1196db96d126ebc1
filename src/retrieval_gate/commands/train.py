"""`retrieval-gate train --config configs/experiments/minilm-closed-book.yaml [--set k=v ...]`."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a learned gate (PyTorch Lightning)")
    p.add_argument("--config", required=True, help="YAML config (configs/experiments/*.yaml)")
    p.add_argument(
        "--set",
        dest="overrides",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="override config keys, e.g. --set trainer.max_epochs=1 data.max_train_examples=2000",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..training import load_config, train

    run_dir = train(load_config(args.config, args.overrides))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    print(f"run folder: {run_dir}")
    print("test:", json.dumps({k: round(v, 4) for k, v in metrics["test"].items()}))
    return 0
