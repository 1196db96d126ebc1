"""The cache folder named by $RETRIEVAL_GATE_CACHE is one place whatever the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval_gate.models import cache_dir


def test_relative_cache_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", "rel-cache")
    first = cache_dir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert first == tmp_path / "rel-cache"
    assert first.is_absolute()


def test_home_in_cache_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", "~/rg-cache")
    assert cache_dir() == tmp_path / "rg-cache"
