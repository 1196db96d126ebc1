"""What the generation cache keys on and what it reads back: a model folder's checksum is of
the weights it holds (not a copied marker's, nor nothing for .pt weights), its config files are
part of the key, a stored value of the wrong shape is damage, and `cache clear` frees a full
disk."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest

from retrieval_gate import fileio
from retrieval_gate.generation import model_folders
from retrieval_gate.generation.base import Generation
from retrieval_gate.generation.cache import CachedGenerator, GenerationStore, store_action
from retrieval_gate.generation.model_folders import MARKER, folder_checksum, weights_checksum

EMPTY = hashlib.sha256(b"").hexdigest()


class FakeGenerator:
    """Answers are a function of the prompt and the model's checksum; counts the prompts."""

    name = "fake"
    backend = "fake"

    def __init__(self, checksum: str = "weights-a"):
        self.checksum = checksum
        self.calls: list[str] = []

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        self.calls += prompts
        return [Generation(f"{p}|{self.checksum}", 2, 3, None) for p in prompts]

    def choice_probs(self, prompts, choices):
        self.calls += prompts
        return np.array([[0.25, 0.75] for _ in prompts])


def _prepared(folder: Path, weights: bytes) -> Path:
    """A folder as `models prepare` leaves one: weights, config and the marker recording them."""
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    marker = {"weights_sha256": weights_checksum(folder), "dtype": "bfloat16"}
    (folder / MARKER).write_text(json.dumps(marker))
    return folder


def test_a_copied_prepared_folder_with_changed_weights_gets_their_checksum(tmp_path):
    a = _prepared(tmp_path / "a", bytes(range(256)) * 64)
    b = tmp_path / "b"
    shutil.copytree(a, b)  # the marker comes along
    weights = bytearray((b / "model.safetensors").read_bytes())
    weights[1000] ^= 0xFF  # same size
    (b / "model.safetensors").write_bytes(bytes(weights))
    assert folder_checksum(a) == weights_checksum(a)
    assert folder_checksum(b) == weights_checksum(b) != folder_checksum(a)


def test_an_untouched_folder_is_hashed_once_per_process(tmp_path, monkeypatch):
    a = _prepared(tmp_path / "a", b"weights" * 1000)
    hashed = []

    def counting(path):
        hashed.append(Path(path).name)
        return fileio.sha256_file(path)

    monkeypatch.setattr(model_folders, "sha256_file", counting)
    first = folder_checksum(a)
    assert folder_checksum(a) == first and hashed == ["model.safetensors"]
    (a / "model.safetensors").write_bytes(b"changed" * 1001)  # hashed again: its size changed
    assert folder_checksum(a) != first and len(hashed) == 2


@pytest.mark.parametrize("suffix", [".pt", ".pth"])
def test_pt_weights_are_hashed(tmp_path, suffix):
    sums = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"model{suffix}").write_bytes(name.encode())
        (folder / "config.json").write_text('{"model_type": "llama"}')
        model_folders.check_model_folder(str(folder))  # weights the loaders take
        sums.append(folder_checksum(folder))
    assert sums[0] != sums[1] and EMPTY not in sums


def test_safetensors_come_first(tmp_path):
    """A folder with safetensors weights and a .pt file beside them: the checksum of the
    safetensors alone, as before .pt weights were hashed (committed labels record it)."""
    a = _prepared(tmp_path / "a", b"weights")
    before = folder_checksum(a)
    (a / "extra.pt").write_bytes(b"optimizer state")
    assert folder_checksum(a) == before


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from tiny_backbones import tiny_backbone

    texts = ["Who wrote Hamlet ? a e 1", "who is the author of hamlet", "the sky is blue"] * 20
    return tiny_backbone("llama", tmp_path_factory.mktemp("models") / "a", texts)


@pytest.mark.parametrize(
    ("name", "edit"),
    [("config.json", ("max_position_embeddings", 512)), ("generation_config.json", ("x", 1))],
)
def test_a_changed_config_misses(tiny_model, tmp_path, monkeypatch, name, edit):
    from retrieval_gate import generation
    from retrieval_gate.generation.cache import lazy_generator

    built: list[FakeGenerator] = []

    def build(name_or_path, backend, **kwargs):
        built.append(FakeGenerator())
        return built[-1]

    monkeypatch.setattr(generation, "build_generator", build)
    store = GenerationStore(tmp_path / "generations.sqlite")
    changed = tmp_path / "changed"
    shutil.copytree(tiny_model, changed)
    path = changed / name
    config = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**config, edit[0]: edit[1]}))
    first = lazy_generator(str(tiny_model), "transformers", store=store)
    first.generate(["who wrote hamlet"], 8)
    again = lazy_generator(str(changed), "transformers", store=store)
    assert again.checksum == first.checksum  # the same weights: the provenance's checksum
    assert again.identity != first.identity
    again.generate(["who wrote hamlet"], 8)
    assert len(built) == 2 and built[1].calls[-1] == "who wrote hamlet"  # a miss
    store.close()


@pytest.mark.parametrize("value", ["[1,2]", '{"texu": "x"}', '{"text": 5, "prompt_tokens": 1}'])
def test_a_row_without_crc_of_the_wrong_shape_is_computed_again(tmp_path, caplog, value):
    fake = FakeGenerator()
    store = GenerationStore(tmp_path / "generations.sqlite")
    gen = CachedGenerator(fake, store=store)
    gen.generate(["q1"], 8)
    gen.choice_probs(["q2"], ["[Yes]", "[No]"])
    db = sqlite3.connect(store.path)
    with db:
        db.execute("UPDATE entries SET crc = NULL, value = ?", (value,))
    db.close()
    with caplog.at_level("WARNING"):
        assert gen.generate(["q1"], 8)[0].text == "q1|weights-a"
        assert gen.choice_probs(["q2"], ["[Yes]", "[No]"]).tolist() == [[0.25, 0.75]]
    assert fake.calls == ["q1", "q2", "q1", "q2"]
    assert caplog.text.count("are damaged: computed again") == 2
    store.close()


def test_scores_of_another_number_of_choices_are_computed_again(tmp_path, caplog):
    fake = FakeGenerator()
    store = GenerationStore(tmp_path / "generations.sqlite")
    gen = CachedGenerator(fake, store=store)
    gen.choice_probs(["q2"], ["[Yes]", "[No]"])
    db = sqlite3.connect(store.path)
    with db:
        db.execute("""UPDATE entries SET crc = NULL, value = '{"probs":[1],"prompt_tokens":1}'""")
    db.close()
    with caplog.at_level("WARNING"):
        assert gen.choice_probs(["q2"], ["[Yes]", "[No]"]).shape == (1, 2)
    assert fake.calls == ["q2", "q2"] and "damaged" in caplog.text
    store.close()


@pytest.fixture
def full_disk(tmp_path):
    """A 3 MB tmpfs (root only; skipped where mounting is not permitted)."""
    folder = tmp_path / "tfs"
    folder.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(folder)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_cache_clear_frees_a_disk_the_cache_filled(full_disk, monkeypatch):
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(full_disk))
    store = GenerationStore(full_disk / "generations.sqlite", limit_bytes=2**40)
    n = 0
    try:
        while shutil.disk_usage(full_disk).free > 0:
            store._put([(f"k{n}", "x" * 10_000, 10_000, 0.0, 0.0, 0)])
            n += 1
    except sqlite3.OperationalError as e:
        assert "full" in str(e)
    store.close()
    assert shutil.disk_usage(full_disk).free == 0
    out = store_action("clear")
    assert out["cleared"] == n and out["entries"] == 0
    assert shutil.disk_usage(full_disk).free > 2_000_000
    again = GenerationStore(full_disk / "generations.sqlite")
    again.put_many({"k": {"text": "a"}})
    assert again.get_many(["k"]) == {"k": {"text": "a"}}
    again.close()
