"""`retrieval-gate cache info|clear`: the generation cache (`generation/cache.py`), and the
`--no-cache` flag of the verbs that generate (label, evaluate, tune, rag, serve)."""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from ..errors import InputError

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
    from ..generation.cache import GenerationStore, cache_path

    path = cache_path()
    try:
        print(json.dumps(_act(GenerationStore(path), args.action), indent=2))
    except (sqlite3.Error, OSError) as e:
        if args.action != "clear":
            raise InputError(
                f"the generation cache is damaged or unreadable ({e}): `retrieval-gate cache "
                "clear` sets it aside and starts an empty one (verbs compute without it "
                "meanwhile)",
                path,
            ) from None
        aside = _set_aside(path)
        print(json.dumps({"set_aside": str(aside), **_act(GenerationStore(path), "clear")},
                         indent=2))  # fmt: skip
    return 0


def _act(store: Any, action: str) -> dict[str, Any]:
    try:
        if action == "clear":
            return {"cleared": store.clear(), **store.info()}
        return store.info()
    finally:
        store.close()


def _set_aside(path: Path) -> Path:
    """A damaged cache file (and its WAL files) renamed beside it, not deleted: it may not be
    ours (a file of the same name in a folder `$RETRIEVAL_GATE_CACHE` named)."""
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):
        part = path.with_name(path.name + suffix)
        if part.exists():
            part.rename(aside.with_name(aside.name + suffix))
    return aside
