"""What export and save_pretrained refuse to leave behind: an export whose fp32 file misses its
parity bar (it replaced the old export), half a save_pretrained copy on a full disk, a run whose
metadata.json contradicts its config.yaml, and model cards whose snippets load another folder.
On a tiny RoBERTa gate trained for 3 batches (real PyTorch and ONNX Runtime)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import scratch
from retrieval_gate.errors import BackendError, DataError
from retrieval_gate.export.build import build_export
from retrieval_gate.fileio import sha256_file
from tiny_backbones import synthetic_questions, tiny_backbone, tiny_config, write_label_file

QUESTIONS, LABELS = synthetic_questions(96, seed=3)
TEXTS = [q.text for q in QUESTIONS]
PARITY = (TEXTS[:24], [LABELS[q.id] for q in QUESTIONS[:24]])
pytestmark = pytest.mark.slow  # every test reads the module's trained gate


@pytest.fixture(scope="module")
def tiny_gate(tmp_path_factory, request) -> Iterator[tuple[Path, Path]]:
    """(run folder, fp32 export folder); read, never written, by the tests."""
    from retrieval_gate.training import train

    with scratch(tmp_path_factory, request, "guards") as root:
        model = tiny_backbone("roberta", root / "roberta", TEXTS)
        cfg = tiny_config(write_label_file(root / "labels.jsonl", LABELS), root / "ck",
                          "encoder", str(model), pooling="cls")  # fmt: skip
        run_dir = train(cfg, questions=QUESTIONS)
        export_dir, _ = build_export(run_dir, root / "ex" / "g1", ("fp32",), parity=PARITY)
        yield run_dir, export_dir


def _files(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file()}


def test_an_export_missing_the_fp32_bar_leaves_the_old_export(tiny_gate, tmp_path, monkeypatch):
    """Bug 1: "fp32 ONNX does not match PyTorch; do not ship this export" (exit 1) came after
    the broken export had replaced the folder, an older good export too, and score, serve and
    from_pretrained loaded it silently. Now nothing is written."""
    import retrieval_gate.export.parity as parity

    run_dir, export_dir = tiny_gate
    old = shutil.copytree(export_dir, tmp_path / "ex" / "g1")
    before = _files(old)
    monkeypatch.setitem(parity.BARS, "fp32", (0.0, 1.0, None))  # no float graph is exact
    with pytest.raises(BackendError, match="fp32 ONNX does not match PyTorch; do not ship") as e:
        build_export(run_dir, old, ("fp32",), parity=PARITY)
    assert e.value.exit_code == 3 and str(e.value).startswith(f"{old}: ")
    assert "nothing was written" in str(e.value)
    assert _files(old) == before and os.listdir(old.parent) == ["g1"]  # no stage left
    assert json.loads((old / "parity.json").read_text())["variants"]["fp32"]["passed"]
    new = tmp_path / "none" / "g1"
    with pytest.raises(BackendError):
        build_export(run_dir, new, ("fp32",), parity=PARITY)
    assert not new.exists() and os.listdir(new.parent) == []


# save_pretrained under a file-size limit below model.onnx's size (root is held to it too)
_LIMITED_SAVE = """
import json, resource, signal, sys
from retrieval_gate import RetrievalGate
from retrieval_gate.errors import RetrievalGateError
gate = RetrievalGate.from_pretrained(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit raises EFBIG
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), hard))
try:
    gate.save_pretrained(sys.argv[2])
    said = None
except RetrievalGateError as e:
    said = [type(e).__name__, str(e)]
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
gate.save_pretrained(sys.argv[2])  # the retry, with room
print(json.dumps(said))
"""


def test_save_pretrained_past_a_file_size_limit_leaves_nothing_and_a_retry_works(
    tiny_gate, tmp_path
):
    """Bug 2: a full disk (or `ulimit -f`) mid-copy was a raw OSError and left half a folder,
    which the retry refused as non-empty and loading called an export to redo."""
    _, export_dir = tiny_gate
    size = (export_dir / "model.onnx").stat().st_size
    out = tmp_path / "saved" / "copy"
    proc = subprocess.run(
        [sys.executable, "-c", _LIMITED_SAVE, str(export_dir), str(out), str(size // 2)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    kind, message = json.loads(proc.stdout.strip().splitlines()[-1])
    assert kind == "InputError" and "file-size limit" in message
    assert message.startswith(f"{out.parent}/.copy.staging-")  # the file being written
    assert os.listdir(out.parent) == ["copy"]  # the retry's folder alone, no stage left
    assert _files(out) == _files(export_dir) | {"README.md": sha256_file(out / "README.md")}


@pytest.mark.parametrize(
    ("key", "value", "section"),
    [("max_length", 4, "data.max_length = 24"), ("model_name", "other/model", "model.name"),
     ("backbone", "t5-lora", "model.backbone = 'encoder'"),
     ("task", "rrcp", "data.task = 'binary'")],
)  # fmt: skip
def test_a_run_whose_metadata_contradicts_its_config_is_refused(
    tiny_gate, tmp_path, key, value, section
):
    """Bug 3: metadata.json (not checksummed: tuning rewrites it) edited or copied from another
    run, max_length 24 -> 4, was exported and scored with every question cut to 4 tokens."""
    from retrieval_gate.training.checkpoint import load_run

    run = shutil.copytree(tiny_gate[0], tmp_path / "run")
    path = run / "metadata.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    expected = (
        f"{path}: field '{key}' = {value!r}, but the run's config.yaml (checksummed) has {section}"
    )
    with pytest.raises(DataError, match=re.escape(expected)) as said:
        load_run(run)
    assert "set it back" not in str(said.value) and f"set '{key}' back to" in str(said.value)
    with pytest.raises(DataError, match=re.escape(expected)):
        build_export(run, tmp_path / "ex" / "g", ("fp32",), parity=PARITY)
    assert not (tmp_path / "ex" / "g").exists()


def _loads(card: str) -> list[str]:
    return re.findall(r'RetrievalGate\.from_pretrained\(("[^"]*")\)', card)


def test_a_saved_or_pushed_cards_snippets_load_the_copy(tiny_gate, tmp_path, monkeypatch):
    """Bug 4: the card baked the export's path (`from_pretrained("ex/g1")`, `score --model
    ex/g1`) and save_pretrained copied it as is: a copy's or a Hub repo's card loaded the
    original folder, or nothing."""
    import huggingface_hub.hub_mixin

    from retrieval_gate import RetrievalGate

    _, export_dir = tiny_gate
    card = (export_dir / "README.md").read_text()
    assert _loads(card) == [json.dumps(str(export_dir))]  # the export, where it was written
    gate = RetrievalGate.from_pretrained(export_dir)
    saved = gate.save_pretrained(tmp_path / "my copy")
    card = (saved / "README.md").read_text()
    assert _loads(card) == [json.dumps(str(saved))] and str(export_dir) not in card
    assert f"--model '{saved}' --input questions.txt" in card
    snippet = re.search(r"## Use\n```python\n(.*?)```", card, re.S).group(1)
    exec(compile(snippet, "card", "exec"), {})  # noqa: S102  (it runs: loads the copy)

    uploaded: dict[str, str] = {}

    class Hub:  # HfApi without the network: keeps the uploaded card
        def __init__(self, token=None):
            pass

        def create_repo(self, repo_id, **kw):
            return SimpleNamespace(repo_id="acme/" + repo_id.split("/")[-1])

        def upload_folder(self, repo_id, folder_path, **kw):
            uploaded[repo_id] = (Path(folder_path) / "README.md").read_text()
            return "commit"

    monkeypatch.setattr(huggingface_hub.hub_mixin, "HfApi", Hub)
    gate.push_to_hub("gate")  # the Hub's full id is the one the card names
    assert _loads(uploaded["acme/gate"]) == ['"acme/gate"']
    assert "--model acme/gate --input" in uploaded["acme/gate"]
