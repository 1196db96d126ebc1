"""`artifacts.open_artifact`, the one reader of a run or export folder (issue 36, part 3): the
manifest a fresh run and export carry, folders made before manifests read from their metadata,
and every damaged, partial or contradictory folder refused with its file and field named (never
read as another kind), by the verbs before any engine starts. JSON folders, no model loaded,
except in the tests marked slow by their fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from retrieval_gate.artifacts import FORMAT, MANIFEST, Manifest, is_checked, open_artifact
from retrieval_gate.cli import main
from retrieval_gate.errors import DataError
from retrieval_gate.fileio import sha256_file
from test_bad_options import no_engine  # noqa: F401  (the fixture: every engine fails the test)
from user_files import forget_checksums, placeholder_weights

STRATEGIES = ["no_retrieval", "one_retrieval", "multi_step"]
CURVE = {"price": [0.0], "mean_cost": [1.0], "shares": [[0.2, 0.6, 0.2]]}
ROUTER = {"strategies": STRATEGIES, "costs": [0.0, 1.0, 3.35], "dev": CURVE,
          "default_budget": 1.0, "default_price": 0.0, "objective": "budget-accuracy"}  # fmt: skip
TWO_STAGE = {"kind": "text", "side": None, "answer_confidence": {"mean": [0.0]}}


def _export(folder: Path, meta: dict, files=("model.onnx", "model.int8.onnx")) -> Path:
    """An export folder made before manifests: gate_metadata.json and (not ONNX) model files."""
    folder.mkdir(parents=True)
    (folder / "gate_metadata.json").write_text(json.dumps(meta))
    for name in files:
        (folder / name).write_bytes(b"not onnx: nothing may load it")
    return folder


def _run(folder: Path, meta: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text(json.dumps(meta))
    placeholder_weights(folder / "gate.pt")
    return folder


def _with_manifest(folder: Path, **changes) -> Path:
    """The folder with the manifest its metadata gives, `changes` applied (...: key removed)."""
    d = {**open_artifact(folder).manifest.to_dict(), **changes}
    (folder / MANIFEST).write_text(json.dumps({k: v for k, v in d.items() if v is not ...}))
    return folder


# ---------------------------------------------------------------- what opens, and as what


def test_folders_made_before_manifests_open_from_their_metadata(tmp_path):
    gate = open_artifact(_export(tmp_path / "gate", {"task": "binary", "side_features": None}))
    assert (gate.kind, gate.task, gate.backend, gate.is_router) == ("export", "gate", "onnx", False)
    assert gate.signals == ("question",) and gate.router is None
    assert gate.manifest.variants == ("fp32", "int8") and gate.source.name == "gate_metadata.json"
    router = open_artifact(_export(tmp_path / "router", {"task": "strategies", "router": ROUTER}))
    assert router.task == "router" and router.manifest.strategies == tuple(STRATEGIES)
    assert router.router.costs == (0.0, 1.0, 3.35) and router.manifest.calibration == ROUTER
    run = open_artifact(_run(tmp_path / "run", {"task": "3way", "side_features": TWO_STAGE}))
    assert (run.kind, run.task, run.backend) == ("run", "rrcp", "torch")
    assert run.signals == ("question", "answer_logprobs") and run.manifest.variants == ()
    cols = {"names": ["s_pop"], "mean": [0.0], "std": [1.0]}
    side = open_artifact(_run(tmp_path / "side", {"task": "binary", "side_features": cols}))
    assert side.signals == ("question", "side_features")
    older = _run(tmp_path / "older", {"task": "binary"})  # its scaling in config.yaml
    (older / "config.yaml").write_text(f"model:\n  side_features: {json.dumps(cols)}\n")
    assert open_artifact(older).signals == ("question", "side_features")


def test_a_manifest_round_trips_and_agrees_with_its_metadata(tmp_path):
    folder = _with_manifest(_export(tmp_path / "r", {"task": "strategies", "router": ROUTER}))
    written = json.loads((folder / MANIFEST).read_text())
    assert written["format"] == FORMAT and written["kind"] == "export"
    assert written["strategies"] == STRATEGIES and written["variants"] == ["fp32", "int8"]
    opened = open_artifact(folder)
    assert opened.source.name == MANIFEST and opened.manifest == Manifest.from_dict(
        written, folder / MANIFEST
    )
    assert opened.model_file("int8").name == "model.int8.onnx"
    with pytest.raises(DataError, match="no fp16 model in this export"):
        opened.model_file("fp16")


# ---------------------------------------------------------------- refused, file and field named


def _router(t: Path) -> Path:
    return _export(t / "f", {"task": "strategies", "router": ROUTER})


def _gate(t: Path) -> Path:
    return _export(t / "f", {"task": "binary", "side_features": None})


MANIFEST_CASES = {  # name -> (folder, manifest changes, what the error names)
    "format-unknown": (_gate, {"format": "retrieval-gate-artifact/9"}, "'format'", "upgrade"),
    "format-missing": (_gate, {"format": ...}, "missing field 'format': the manifest is damaged"),
    "kind-unknown": (_gate, {"kind": "model"}, "'kind'"),
    "kind-contradicts-files": (_gate, {"kind": "run"}, "'kind'", "an export"),
    "task-missing": (_gate, {"task": ...}, "missing field 'task'"),
    "task-unknown": (_gate, {"task": "classifier"}, "'task'", "gate, router, rrcp"),
    "task-router-but-gate-metadata": (_gate, {"task": "router"}, "'task'", "contradicts"),
    "task-gate-but-router-metadata": (_router, {"task": "gate"}, "'task'", "contradicts"),
    "signals-not-a-list": (_gate, {"signals": "question"}, "'signals'", "a list"),
    "signals-unknown": (_gate, {"signals": ["question", "mood"]}, "'signals'"),
    "signals-contradict": (_gate, {"signals": ["question", "answer_logprobs"]}, "'signals'"),
    "strategies-contradict": (_router, {"strategies": STRATEGIES[:2]}, "'strategies'"),
    "calibration-missing-costs": (
        _router,
        {"calibration": {**ROUTER, "costs": ...}},
        "calibration",
        "costs",
    ),  # fmt: skip
    "calibration-contradicts": (
        _router,
        {"calibration": {**ROUTER, "default_budget": 2.0}},
        "field 'calibration.default_budget' = 2.0 contradicts",  # the key, not the whole dict
        "contradicts",
    ),  # fmt: skip
    "variant-file-missing": (_gate, {"variants": ["fp32", "fp16"]}, "'variants'", "model.fp16"),
    "variants-empty": (_gate, {"variants": []}, "'variants'", "at least one"),
    "version-not-a-string": (_gate, {"package_version": 1}, "'package_version'"),
}


@pytest.mark.parametrize("name", MANIFEST_CASES)
def test_a_damaged_or_contradictory_manifest_is_refused(tmp_path, name):
    make, changes, *expect = MANIFEST_CASES[name]
    folder = make(tmp_path)
    if name == "calibration-missing-costs":
        changes = {"calibration": {k: v for k, v in ROUTER.items() if k != "costs"}}
    _with_manifest(folder, **changes)
    with pytest.raises(DataError) as e:
        open_artifact(folder)
    message = str(e.value)
    assert "manifest.json" in message and ("re-export" in message or "upgrade" in message)
    for part in expect:
        assert part in message, message


@pytest.mark.parametrize(
    ("text", "expect"),
    [('{"kind": "exp', "unreadable JSON"), ("[]", "JSON object"), ("\xff", "unreadable")],
)
def test_an_unreadable_manifest_is_refused(tmp_path, text, expect):
    folder = _gate(tmp_path)
    (folder / MANIFEST).write_text(text, encoding="latin-1")
    with pytest.raises(DataError, match=expect) as e:
        open_artifact(folder)
    assert "manifest.json" in str(e.value)


METADATA_CASES = {  # an older folder's metadata -> what the error names
    "not-an-object": ([1, 2], "JSON object"),
    "task-missing": ({"side_features": None}, "missing field 'task'"),
    "task-unknown": ({"task": "regression"}, "'task'"),
    "router-task-without-calibration": ({"task": "strategies"}, "key router"),
    "gate-task-with-calibration": ({"task": "binary", "router": ROUTER}, "key router"),
    "calibration-without-costs": (
        {"task": "strategies", "router": {k: v for k, v in ROUTER.items() if k != "costs"}},
        "costs",
    ),  # fmt: skip
    "calibration-not-an-object": ({"task": "strategies", "router": [1]}, "field .router."),
    "side-features-not-an-object": ({"task": "binary", "side_features": 3}, "side_features"),
    # hand-edited or damaged: an internal error ("abc", -3, 10**30) or read as given (5, NaN)
    "threshold-not-a-number": ({"task": "binary", "threshold": "abc"}, "'threshold' = 'abc'"),
    "threshold-past-1": ({"task": "binary", "threshold": 5}, "is not a number in \\[0, 1\\]"),
    "threshold-nan": ({"task": "binary", "threshold": float("nan")}, "'threshold' = nan"),
    "threshold-bool": ({"task": "binary", "threshold": True}, "'threshold' = True"),
    "max-length-negative": ({"task": "binary", "max_length": -3}, "'max_length' = -3"),
    "max-length-huge": ({"task": "binary", "max_length": 10**30}, "whole number of tokens"),
    "max-length-text": ({"task": "binary", "max_length": "48"}, "'max_length' = '48'"),
    "classes-one": ({"task": "binary", "classes": ["a"]}, "at least two class names"),
    "classes-not-names": ({"task": "binary", "classes": [0, 1]}, "'classes' = \\[0, 1\\]"),
}


@pytest.mark.parametrize("name", METADATA_CASES)
@pytest.mark.parametrize("kind", ["run", "export"])
def test_damaged_metadata_is_refused_never_read_as_another_kind(tmp_path, name, kind):
    meta, expect = METADATA_CASES[name]
    folder = (_run if kind == "run" else _export)(tmp_path / "f", meta)
    with pytest.raises(DataError, match=expect) as e:
        open_artifact(folder)
    file = "metadata.json" if kind == "run" else "gate_metadata.json"
    assert file in str(e.value) and ("re-train" in str(e.value) or "re-export" in str(e.value))


def test_folders_of_the_wrong_kind_or_none_are_refused(tmp_path):
    run = _run(tmp_path / "run", {"task": "binary"})
    # the fix names the command for this folder (it said: "point at the folder that export
    # (an export) or train (a training run) wrote", a training run being what it refused)
    with pytest.raises(
        DataError,
        match=r"--onnx: this folder holds a training run, not an "
        r"export: export it first \(`retrieval-gate export --run .*run`\)",
    ):
        open_artifact(run, "export", "--onnx")
    export = _gate(tmp_path)
    with pytest.raises(
        DataError,
        match=r"holds an export, not a training run: .*Pass the "
        r"training run it was exported from.*--gate onnx --onnx .*gate",
    ):
        open_artifact(export, "run")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="neither an export") as e:
        open_artifact(tmp_path / "empty")
    assert "it holds" not in str(e.value)
    # `export --out-dir` is the exports' parent: pointed at, it names the export inside
    with pytest.raises(DataError, match=r"neither an export.*; it holds .*/f, .*/run$"):
        open_artifact(export.parent)
    with pytest.raises(DataError, match="no such folder"):
        open_artifact(tmp_path / "missing")
    with pytest.raises(DataError, match="a file, not a folder"):
        open_artifact(export / "model.onnx")
    (export / "gate_metadata.json").unlink()  # the model files alone: partial, not guessed
    with pytest.raises(DataError, match="missing file") as e:
        open_artifact(export)
    assert "gate_metadata.json" in str(e.value)


@pytest.mark.slow  # a subprocess
def test_a_run_whose_weights_are_cut_short_is_refused_before_torch(tmp_path, capsys):
    """gate.pt is a torch.save zip archive: one cut to 30% (a copy that stopped) has no central
    directory, and `export` says so naming the file, before it imports torch or ONNX."""
    import subprocess
    import sys
    import zipfile

    run = _run(tmp_path / "run", {"task": "binary"})
    for part in ("backbone", "tokenizer"):
        (run / part).mkdir()
    (run / "config.yaml").write_text("model: {}\n")
    with zipfile.ZipFile(run / "gate.pt", "w") as z:
        z.writestr("archive/data.pkl", bytes(range(256)) * 64)
    data = (run / "gate.pt").read_bytes()
    open_artifact(run, "run")  # whole: accepted
    (run / "gate.pt").write_bytes(data[: int(len(data) * 0.3)])
    with pytest.raises(DataError, match="gate.pt is corrupt or incomplete") as e:
        open_artifact(run, "run")
    assert "re-train it" in str(e.value) and str(run / "gate.pt") in str(e.value)
    probe = (
        "import sys; from retrieval_gate.cli import main; rc = main(['export', '--run', sys.argv[1],"
        " '--out-dir', sys.argv[2]]); assert rc == 2, rc;"
        " assert 'torch' not in sys.modules and 'onnxruntime' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(run), str(tmp_path / "out")],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "gate.pt is corrupt or incomplete" in done.stderr and not (tmp_path / "out").exists()


def test_an_onnx_file_that_contradicts_its_manifest_is_refused(tmp_path):
    from retrieval_gate.gates.onnx import check_agrees

    router = open_artifact(_router(tmp_path / "r"))
    gate = open_artifact(_gate(tmp_path / "g"))
    path = tmp_path / "model.onnx"
    check_agrees(router, {"task": "strategies", "router": "{}"}, ["scores", "strategy_proba"], path)
    check_agrees(gate, {"task": "binary"}, ["scores", "probs"], path)
    with pytest.raises(DataError, match="lacks the router's metadata router and output strategy"):
        check_agrees(router, {"task": "strategies"}, ["scores", "probs"], path)
    with pytest.raises(DataError, match="says task 'gate', but this ONNX file has the router's"):
        check_agrees(gate, {"task": "binary", "router": "{}"}, ["scores", "strategy_proba"], path)
    with pytest.raises(DataError, match="its task is rrcp"):
        check_agrees(gate, {"task": "3way"}, ["scores", "probs"], path)


# ---------------------------------------------------------------- the verbs, before any engine


def _contradictory(t: Path) -> Path:
    """A router export whose manifest.json says it is a binary gate."""
    return _with_manifest(_router(t), task="gate", strategies=[], calibration=None)


VERBS = {
    "rag": "rag --modes never router --router {f}",
    "serve": "serve --router {f}",
    "serve-gate": "serve --mode gate --gate onnx --onnx {f}",
    "score": "score --model {f} --input {q}",
    "evaluate": "evaluate --gates onnx --onnx {f} --labels data/labels/smollm2-135m-instruct/"
    "closed-book.jsonl --out {t}/ev --no-cost",
    "tune": "tune --gate onnx --onnx {f} --objective budget-accuracy --labels data/labels/"
    "smollm2-135m-instruct/closed-book.jsonl --out {t}/tu --budget 1",
    "rag-answer-gate": "rag --modes never cascade --router {g} --answer-gate {f}",
}


@pytest.mark.parametrize("verb", VERBS)
def test_verbs_refuse_a_contradictory_manifest_before_any_engine(verb, tmp_path, capsys, no_engine):  # noqa: F811  # fmt: skip
    folder = _contradictory(tmp_path)
    good = _export(tmp_path / "good", {"task": "strategies", "router": ROUTER})
    (tmp_path / "q.txt").write_text("Who wrote Hamlet?\n")
    argv = VERBS[verb].format(f=folder, g=good, q=tmp_path / "q.txt", t=tmp_path).split()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "engine started" not in err, err
    assert "manifest.json" in err and "'task'" in err and "re-export" in err, err


# ---------------------------------------------------------------- fresh runs and exports (slow)


def test_a_fresh_run_and_export_carry_a_manifest(minilm_gate_dirs, tmp_path):
    from retrieval_gate import RetrievalGate
    from retrieval_gate.gates.pretrained import RetrievalRouter

    run_dir, export_dir = minilm_gate_dirs
    for folder, kind, variants in (
        (run_dir, "run", []),
        (export_dir, "export", ["fp32", "opt", "int8"]),
    ):
        manifest = json.loads((folder / MANIFEST).read_text())
        assert manifest == {"format": FORMAT, "kind": kind, "task": "gate",
                            "signals": ["question"], "strategies": [], "calibration": None,
                            "variants": variants,
                            "package_version": manifest["package_version"],
                            "checksums": manifest["checksums"]}  # fmt: skip
        tokenizer = [f"tokenizer/{f.name}" for f in (folder / "tokenizer").glob("*")]
        backbone = [f"backbone/{f.name}" for f in (folder / "backbone").glob("*")]
        onnx_files = ["model.onnx", "model.opt.onnx", "model.int8.onnx"]
        weights = (["gate.pt", "config.yaml", *tokenizer, *backbone] if kind == "run"
                   else [*onnx_files, "tokenizer.json"])  # fmt: skip
        assert kind == "export" or "tokenizer/tokenizer.json" in tokenizer
        assert manifest["checksums"] == {n: sha256_file(folder / n) for n in weights}
        assert open_artifact(folder).source.name == MANIFEST
        gate = RetrievalGate.from_pretrained(folder, device="cpu")
        assert (
            not isinstance(gate, RetrievalRouter) and gate.backend == open_artifact(folder).backend
        )
    saved = RetrievalGate.from_pretrained(run_dir, device="cpu").save_pretrained(tmp_path / "s")
    assert (saved / MANIFEST).is_file() and open_artifact(saved).kind == "run"
    copy = Path(shutil.copytree(export_dir, tmp_path / "copy"))
    (copy / "model.int8.onnx").unlink()  # listed in the manifest, gone from the folder
    with pytest.raises(DataError, match="'variants' lists int8"):
        RetrievalGate.from_pretrained(copy)


def _flip_a_byte(path: Path) -> None:
    """One bit flipped in the middle of a weights file: in its numbers, not its structure."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def test_weights_changed_after_writing_are_refused(minilm_gate_dirs, tmp_path, capsys):
    """A bit flipped in gate.pt or model.onnx (a disk, a copy) loaded and scored with the
    changed weights, and so did another export's model file or tokenizer copied in: nothing
    read the file's own integrity. The manifest now records each such file's sha256 as it is
    written, and loading refuses a file that differs, naming it, before torch or ONNX Runtime
    reads it."""
    from retrieval_gate import RetrievalGate
    from retrieval_gate.gates.learned import LearnedGate

    run_dir, export_dir = minilm_gate_dirs
    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    _flip_a_byte(run / "gate.pt")
    with pytest.raises(DataError, match="damaged or replaced: its sha256") as e:
        LearnedGate(run)
    assert str(run / "gate.pt") in str(e.value) and "re-train it" in str(e.value)
    export = Path(shutil.copytree(export_dir, tmp_path / "export"))
    RetrievalGate.from_pretrained(export)  # whole: loads
    _flip_a_byte(export / "model.onnx")
    with pytest.raises(DataError, match="damaged or replaced") as e:
        RetrievalGate.from_pretrained(export)
    assert "model.onnx" in str(e.value) and "re-export it" in str(e.value)
    (tmp_path / "q.txt").write_text("Who wrote Hamlet?\n")
    argv = ["score", "--model", str(export), "--input", str(tmp_path / "q.txt")]
    assert main(argv) == 2 and "damaged or replaced" in capsys.readouterr().err
    shutil.copy(export / "model.int8.onnx", export / "model.onnx")  # another model's file
    with pytest.raises(DataError, match="model.onnx: damaged or replaced"):
        RetrievalGate.from_pretrained(export, variant="fp32")
    RetrievalGate.from_pretrained(export, variant="int8")  # the untouched variant still loads
    tokens = json.loads((export / "tokenizer.json").read_text())
    tokens["model"]["vocab"]["hamlet"] = 7  # another word list: every score would shift
    (export / "tokenizer.json").write_text(json.dumps(tokens))
    with pytest.raises(DataError, match="tokenizer.json: damaged or replaced"):
        RetrievalGate.from_pretrained(export, variant="int8")
    forget_checksums(export)
    RetrievalGate.from_pretrained(export, variant="int8")
    export = Path(shutil.copytree(export_dir, tmp_path / "export2"))
    shutil.copy(export / "model.int8.onnx", export / "model.onnx")  # changed on purpose
    manifest = json.loads((export / MANIFEST).read_text())
    del manifest["checksums"]["model.onnx"]  # the way out the message names
    (export / MANIFEST).write_text(json.dumps(manifest))
    RetrievalGate.from_pretrained(export, variant="fp32")


def test_checksums_in_a_manifest_are_checked_for_shape(tmp_path):
    """A manifest's checksums must be weights file names to sha256 hex digests."""
    base = {"format": FORMAT, "kind": "run", "task": "gate", "signals": ["question"],
            "strategies": [], "calibration": None, "variants": [], "package_version": "x"}  # fmt: skip
    assert Manifest.from_dict(base, tmp_path / MANIFEST).checksums == {}  # older manifests
    good = {"gate.pt": "a" * 64}
    assert Manifest.from_dict({**base, "checksums": good}, tmp_path / MANIFEST).checksums == good
    for bad in ({"gate.pt": "a" * 63}, {"other.bin": "a" * 64}, ["a" * 64], {"gate.pt": "G" * 64}):
        with pytest.raises(DataError, match="'checksums'"):
            Manifest.from_dict({**base, "checksums": bad}, tmp_path / MANIFEST)


def test_checksums_name_checked_files_and_a_runs_tokenizer_files_only():
    for name in ("gate.pt", "model.int8.onnx", "tokenizer.json", "tokenizer/vocab.txt",
                 "tokenizer/tokenizer_config.json"):  # fmt: skip
        assert is_checked(name), name
    for name in ("metrics.json", "tokenizer/", "tokenizer/..", "tokenizer/../gate.pt",
                 "tokenizer/a/b", "/etc/passwd", 3, None):  # fmt: skip
        assert not is_checked(name), name
