"""The generation cache on someone else's SQLite file: recognised before anything writes it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from retrieval_gate.cli import main
from retrieval_gate.generation import cache as gcache
from retrieval_gate.generation.base import Generation


class Fake:
    name = "fake"
    backend = "fake"
    checksum = "weights-a"

    def __init__(self):
        self.calls: list[list[str]] = []

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        self.calls.append(list(prompts))
        return [Generation(f"{p}!", 1, 1, None) for p in prompts]

    def choice_probs(self, prompts, choices):
        raise AssertionError("not used")


def _foreign(path: Path, schema: str) -> bytes:
    """Someone's database with a table named `entries` (plus `schema`), as its bytes."""
    with sqlite3.connect(path) as db:
        db.executescript(schema)
        db.execute("INSERT INTO entries (key, used) VALUES ('theirs', 1.0)")
    db.close()
    return path.read_bytes()


SCHEMAS = {
    # our columns but another table beside them
    "other table": "CREATE TABLE entries (key TEXT PRIMARY KEY, value TEXT, bytes INTEGER, "
    "created REAL, used REAL, hits INTEGER DEFAULT 0); CREATE TABLE users (name TEXT);",
    # a `used` column (our index fits it) but not our other columns
    "other columns": "CREATE TABLE entries (key TEXT, used REAL, note TEXT);",
}


@pytest.mark.parametrize("kind", list(SCHEMAS))
def test_clear_sets_someone_elses_database_aside_unchanged(tmp_path, monkeypatch, capsys, kind):
    """`cache clear` deleted the rows of a foreign `entries` table (and added our index and
    column to it) before it failed and was set aside; now it is set aside byte for byte."""
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    path = tmp_path / gcache.CACHE_FILE
    before = _foreign(path, SCHEMAS[kind])
    assert main(["cache", "info"]) == 2  # refused, named, with the fix
    err = capsys.readouterr().err
    assert str(path) in err and "not a generation cache" in err and "RETRIEVAL_GATE_CACHE" in err
    assert path.read_bytes() == before
    assert main(["cache", "clear"]) == 0
    out = json.loads(capsys.readouterr().out)
    aside = Path(out["set_aside"])
    assert aside.read_bytes() == before and out["entries"] == 0
    with sqlite3.connect(aside) as db:
        assert db.execute("SELECT key FROM entries").fetchall() == [("theirs",)]
    db.close()


def test_a_verb_computes_without_writing_someone_elses_database(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("RETRIEVAL_GATE_NO_CACHE", raising=False)
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    path = tmp_path / gcache.CACHE_FILE
    before = _foreign(path, SCHEMAS["other columns"])
    monkeypatch.setattr(gcache, "_STORES", {})
    fake = Fake()
    gcache.cached(fake).generate(["q"], 4)
    assert fake.calls == [["q"]] and path.read_bytes() == before
    assert "not a generation cache" in caplog.text and "RETRIEVAL_GATE_CACHE" in caplog.text


def test_our_own_caches_still_open(tmp_path):
    """A new file, one made before CRCs, and one written now are all recognised as ours."""
    path = tmp_path / "g.sqlite"
    store = gcache.GenerationStore(path)
    store.put_many({"k": {"a": 1}})
    store.close()
    store = gcache.GenerationStore(path)
    assert store.get_many(["k"]) == {"k": {"a": 1}} and store.clear() == 1
    store.close()
