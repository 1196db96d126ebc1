"""What a demo stage's key follows (the configs a config extends, the files they name, the
Adaptive-RAG release) and what its done marker records of the files it made."""

import json
import shutil
from pathlib import Path

import retrieval_gate.demo as demo
from retrieval_gate.demo import STAGES, run_demo
from retrieval_gate.stage_markers import inputs_key, named_files

ROOT = Path(__file__).parents[1]


def _configs(root):
    """A checkout's configs: an experiment extending another, which extends ../base.yaml and
    a backbone by name, and names a label file from the checkout's root."""
    (root / "configs" / "experiments").mkdir(parents=True)
    (root / "configs" / "backbones").mkdir()
    (root / "data").mkdir()
    files = {
        "configs/base.yaml": "run:\n  seed: 0\n",
        "configs/backbones/tiny.yaml": "model:\n  backbone: tiny\n",
        "configs/experiments/parent.yaml": "extends: [../base.yaml, tiny]\n"
        "data:\n  label_file: data/labels.jsonl\n",
        "configs/experiments/child.yaml": "extends: parent.yaml\nmodel:\n  dropout: 0.1\n",
        "data/labels.jsonl": '{"id": "a", "label": 1}\n',
    }
    for name, text in files.items():
        (root / name).write_text(text)
    return root / "configs" / "experiments" / "child.yaml"


def test_a_config_it_extends_and_the_label_file_they_name_are_a_stages_inputs(
    tmp_path, monkeypatch
):
    """Only the file the command named was followed: the configs it `extends` (relative to the
    YAML's own folder) and the label file they name were not, so editing configs/base.yaml,
    the experiment config extended or the labels did not re-run train."""
    child = _configs(tmp_path / "checkout")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the label file is found from the checkout's root
    argv, out = ["train", "--config", str(child)], tmp_path / "out"
    named = {p.resolve().relative_to(tmp_path / "checkout").as_posix() for p in named_files(argv)}
    assert named == {"configs/experiments/child.yaml", "configs/experiments/parent.yaml",
                     "configs/base.yaml", "configs/backbones/tiny.yaml", "data/labels.jsonl"}  # fmt: skip
    for name in named:
        key = inputs_key(argv, "code", [], out)
        path = tmp_path / "checkout" / name
        path.write_text(path.read_text() + "\n# edited\n")
        assert inputs_key(argv, "code", [], out) != key, name


def test_a_cycle_of_extends_ends(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: [a.yaml, a.yaml]\nname: " + "x" * 5000 + "\n")
    assert [p.name for p in named_files(["--config", "a.yaml"])] == ["a.yaml", "b.yaml"]


def test_the_demos_gate_key_follows_its_config_chain_and_label_file(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    named = {p.resolve() for p in named_files(demo._train(tmp_path))}
    for name in ("configs/experiments/cascade-closed-book.yaml", "configs/base.yaml",
                 "configs/experiments/minilm-stacked-closed-book.yaml",
                 "configs/backbones/minilm.yaml", demo.CLOSED_BOOK):  # fmt: skip
        assert (ROOT / name).resolve() in named, name


# What the run and export stages write (of it, what the demo's `Stage.outputs` name)
RUN = ("config.yaml", "gate.pt", "metadata.json", "manifest.json", "backbone/config.json",
       "tokenizer/tokenizer.json")  # fmt: skip
EXPORT = ("model.onnx", "model.int8.onnx", "tokenizer.json", "gate_metadata.json", "manifest.json")
FOLDERS = {"train": ("checkpoints/minilm-closed-book", RUN),
           "router-train": ("checkpoints/router-llama8b", RUN),
           "export": ("export/minilm-gate", EXPORT), "router-export": ("export/router-llama8b", EXPORT)}  # fmt: skip


def _make(out, stage, n):
    """What a stage writes (stand-ins), the n-th time it runs: its files, and tune rewrites the
    run's metadata.json and the manifest's record of it, as --save-objective does (a second
    demo re-ran the router's stages when only metadata.json was known to change)."""
    folder, names = FOLDERS.get(stage.name, ("", ()))
    tuned = {"tune": "checkpoints/minilm-closed-book", "router-tune": "checkpoints/router-llama8b"}
    if stage.name in tuned:
        folder, names = tuned[stage.name], ("metadata.json", "manifest.json")
    for path in (out / folder / name for name in names):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{stage.name} {n}\n" * 100)
    for path in stage.outputs(out):  # its reports, the label sample
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{stage.name} {n}\n" * 100)


def _demo(out, monkeypatch):
    """run_demo with stages that write their outputs under `out`; the stages that ran."""
    ran = []
    by_name = {s.name: s for s in STAGES}

    def run_stage(argv, name, *a, **k):
        ran.append(name)
        _make(out, by_name[name], len(ran))
        return 0

    monkeypatch.setattr(demo, "run_stage", run_stage)
    monkeypatch.chdir(ROOT)
    assert run_demo(out) == 0
    return ran


def test_a_truncated_weights_file_or_label_sample_runs_its_stage_again(tmp_path, monkeypatch):
    """Only a run's manifest.json was checked, and the label sample not at all: a truncated
    gate.pt was reused by train, tune, export and evaluate, then rag failed on it, and the
    demo's advice (re-run `make demo`) reused the broken run again."""
    out = tmp_path / "demo"
    assert _demo(out, monkeypatch) == [s.name for s in STAGES]
    assert _demo(out, monkeypatch) == []  # tune rewrote train's metadata.json: still reused
    weights = out / "checkpoints" / "minilm-closed-book" / "gate.pt"
    with open(weights, "r+b") as f:
        f.truncate(100)
    assert _demo(out, monkeypatch) == ["train", "tune", "export", "evaluate", "rag"]
    done = json.loads((out / "train.done.json").read_text())
    assert "checkpoints/minilm-closed-book/gate.pt" in done["outputs"]
    assert "checkpoints/minilm-closed-book/backbone/config.json" in done["outputs"]
    sample = out / "labels-sample" / "closed-book.jsonl"
    sample.write_bytes(sample.read_bytes()[:50])
    assert _demo(out, monkeypatch) == ["labels"]  # no stage reads the sample
    shutil.rmtree(out / "checkpoints" / "router-llama8b" / "tokenizer")
    assert _demo(out, monkeypatch) == ["router-train", "router-tune", "router-export",
                                       "router-evaluate"]  # fmt: skip
    for name in ("model.int8.onnx", "tokenizer.json"):  # an export's variant, its tokenizer
        path = out / "export" / "minilm-gate" / name
        path.write_bytes(b"E" + path.read_bytes()[1:])  # cut or edited in place, same size
        assert _demo(out, monkeypatch) == ["export", "evaluate", "rag"]


def test_a_file_is_hashed_only_when_its_size_or_mtime_changed(tmp_path):
    from retrieval_gate.stage_markers import damaged_output, output_record

    out = tmp_path
    path = out / "gate.pt"
    path.write_bytes(b"weights")
    record = output_record([path], out)
    assert damaged_output([path], out, [record]) is None
    path.write_bytes(b"WEIGHTS")  # same size, a new mtime: hashed, and found changed
    assert "was changed since it wrote it" in damaged_output([path], out, [record])
    path.write_bytes(b"weights")  # its contents again, another mtime: as it was left
    assert damaged_output([path], out, [record]) is None
    assert "no record in its marker" in damaged_output([path], out, [{}])
    path.unlink()
    assert "is missing" in damaged_output([], out, [record])  # recorded, though not listed


def test_the_router_stages_follow_the_adaptive_rag_release(tmp_path, monkeypatch):
    """$RETRIEVAL_GATE_ADAPTIVE_RAG, read ahead of the data folder, was in no stage's key: the
    router's stages were reused on another release's outcomes."""
    from retrieval_gate.data.adaptive_rag import release_root

    out = tmp_path / "demo"
    _demo(out, monkeypatch)
    copy = tmp_path / "release"
    shutil.copytree(release_root(), copy)
    monkeypatch.setenv("RETRIEVAL_GATE_ADAPTIVE_RAG", str(copy))
    assert _demo(out, monkeypatch) == []  # the same release, elsewhere
    changed = next(p for p in sorted(copy.rglob("*")) if p.is_file() and p.suffix == ".json")
    changed.write_text(changed.read_text() + " ")
    router = [s.name for s in STAGES if s.name.startswith("router-")]
    assert _demo(out, monkeypatch) == router  # and not the binary gate's stages
