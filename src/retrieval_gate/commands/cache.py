"""`retrieval-gate cache info|clear`: the generation cache (`generation/cache.py`), and the
`--no-cache` flag of the verbs that generate (label, evaluate, tune, rag, serve)."""

from __future__ import annotations

import argparse
import json

NO_CACHE_HELP = (
    "compute every generation and choice score afresh: neither read nor write the generation "
    "cache ($RETRIEVAL_GATE_CACHE/generations.sqlite; sets RETRIEVAL_GATE_NO_CACHE=1, so the "
    "RAG comparison's costs are measured now, not replayed from the cache)"
)


def add_no_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-cache", action="store_true", help=NO_CACHE_HELP)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="show or clear the generation cache")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("info", help="path, entries, stored size, bound and hits, as JSON")
    actions.add_parser("clear", help="delete every cached generation and choice score")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..generation.cache import store_action

    print(json.dumps(store_action(args.action), indent=2))
    return 0
