"""`retrieval-gate models prepare`: convert the bundled SmolLM2 once; show where MiniLM is."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="prepare the offline models")
    verbs = p.add_subparsers(dest="action", required=True)
    prep = verbs.add_parser("prepare", help="GGUF -> safetensors cache folder (once)")
    prep.add_argument("--force", action="store_true", help="convert again even if cached")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..generation.model_folders import MARKER, prepare_smollm2
    from ..models import minilm_path

    folder = prepare_smollm2(force=args.force)
    marker = json.loads((folder / MARKER).read_text())
    print(f"smollm2-135m-instruct: {folder}")
    print(f"  weights sha256: {marker['weights_sha256']} (from GGUF {marker['gguf_sha256'][:12]})")
    print(f"minilm: {minilm_path()}")
    return 0
