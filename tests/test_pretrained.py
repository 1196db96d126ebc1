"""`RetrievalGate`: from_pretrained on export folders, run folders and Hub ids (through
`snapshot_download`'s local-dir form, no network), predict/predict_proba on bare strings,
save_pretrained / push_to_hub round trips (huggingface_hub's ModelHubMixin; its `HfApi` replaced
by a local folder), side features, bad inputs. Real ONNX Runtime and
PyTorch on a MiniLM gate trained for two batches."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from retrieval_gate import RetrievalGate
from retrieval_gate.errors import InputError
from retrieval_gate.gates.onnx import OnnxGate
from retrieval_gate.gates.pretrained import as_questions
from retrieval_gate.questions import Question

TEXTS = ["Who wrote Hamlet?", "What is the zorblat of quenvik tesque?", "Is the sky blue?"]


@pytest.fixture
def gate_dirs(minilm_gate_dirs) -> tuple[Path, Path]:
    return minilm_gate_dirs


@pytest.mark.slow  # a subprocess
def test_root_import_is_cheap_and_lazy():
    code = (
        "import sys, retrieval_gate\n"
        "assert not {'torch', 'onnxruntime', 'numpy'} & set(sys.modules), sys.modules.keys()\n"
        "from retrieval_gate import RetrievalGate\n"
        "assert RetrievalGate.__name__ == 'RetrievalGate' and 'torch' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        import retrieval_gate

        retrieval_gate.Nope  # noqa: B018


def test_onnx_export_scores_bare_strings(gate_dirs):
    _, export_dir = gate_dirs
    gate = RetrievalGate.from_pretrained(export_dir, variant="int8")
    assert gate.backend == "onnx" and gate.device == "CPUExecutionProvider"
    assert gate.threshold == pytest.approx(0.42)
    assert gate.metadata["threshold_objective"] == "max macro-F1 on dev"
    probs = gate.predict_proba(TEXTS)
    assert probs.shape == (3,) and ((probs >= 0) & (probs <= 1)).all()
    np.testing.assert_allclose(probs, OnnxGate(export_dir, "int8").score_texts(TEXTS), atol=1e-6)
    one = gate.predict_proba(TEXTS[1])
    # dynamic int8 quantises activations per batch: batch 1 and batch 3 differ slightly
    assert isinstance(one, float) and one == pytest.approx(float(probs[1]), abs=0.01)
    assert list(gate.predict(TEXTS)) == list(probs >= 0.42)
    assert list(gate.predict(TEXTS, threshold=0.0)) == [True] * 3
    assert gate.predict(TEXTS[0]) is bool(probs[0] >= 0.42)
    qs = [Question(id=f"x{i}", text=t, answers=(), source="mine") for i, t in enumerate(TEXTS)]
    np.testing.assert_allclose(gate.predict_proba(qs), probs, atol=1e-6)
    # a router's call on a binary gate says so (it was only "object has no attribute 'route'")
    with pytest.raises(AttributeError, match=r"'route' is a router's: .* holds a binary gate"):
        gate.route(TEXTS)
    assert not hasattr(gate, "strategies") and not hasattr(gate, "nope")
    # pickled for a worker (multiprocessing, Ray) as its folder: an ONNX session cannot be
    import copy
    import pickle

    gate.threshold = 0.3
    for copied in (pickle.loads(pickle.dumps(gate)), copy.deepcopy(gate)):
        assert copied.threshold == 0.3 and copied.variant == "int8" and copied is not gate
        np.testing.assert_allclose(copied.predict_proba(TEXTS), probs, atol=1e-6)


def test_torch_backend_on_a_run_folder_agrees_with_onnx(gate_dirs):
    run_dir, export_dir = gate_dirs
    torch_gate = RetrievalGate.from_pretrained(run_dir, device="cpu")
    assert torch_gate.backend == "torch" and torch_gate.device == "cpu"
    assert torch_gate.threshold == pytest.approx(0.42)
    onnx_probs = RetrievalGate.from_pretrained(export_dir).predict_proba(TEXTS)
    np.testing.assert_allclose(torch_gate.predict_proba(TEXTS), onnx_probs, atol=1e-4)


def test_save_pretrained_and_hub_local_dir_round_trip(gate_dirs, tmp_path):
    _, export_dir = gate_dirs
    gate = RetrievalGate.from_pretrained(export_dir)
    saved = gate.save_pretrained(tmp_path / "saved")
    # the export's files as they are: its own card kept, no config.json from the mixin
    assert sorted(p.name for p in saved.iterdir()) == sorted(
        p.name for p in export_dir.iterdir() if p.is_file()
    )
    # its snippets load the copy (they named the export's folder: test_export_guards)
    card = (export_dir / "README.md").read_text().replace(str(export_dir), str(saved))
    assert (saved / "README.md").read_text() == card
    with pytest.raises(InputError, match="non-empty folder"):
        gate.save_pretrained(saved)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(InputError, match="is a file: give a new or empty folder"):
        gate.save_pretrained(tmp_path / "a-file")
    assert (tmp_path / "a-file").read_text() == "x"  # refused before anything is written
    # A Hub id resolves through snapshot_download; its local-dir form needs no network.
    hub = RetrievalGate.from_pretrained(
        "acme/minilm-gate", local_dir=saved, local_files_only=True, variant="int8"
    )
    assert hub.folder == saved.resolve() and hub.threshold == pytest.approx(0.42)
    np.testing.assert_allclose(
        hub.predict_proba(TEXTS), RetrievalGate.from_pretrained(saved, variant="int8")
        .predict_proba(TEXTS), atol=1e-6,
    )  # fmt: skip
    with pytest.raises(
        InputError, match="no local folder .acme/absent.*not in the local Hub cache"
    ):
        RetrievalGate.from_pretrained(
            "acme/absent", cache_dir=tmp_path / "hf", local_files_only=True
        )


def test_what_the_api_would_read_wrongly_is_refused_naming_the_argument(gate_dirs, tmp_path):
    """Each was silently wrong: a DataFrame scored as its column names (one score, of
    "question"), a misspelt keyword or a run's `variant` ignored, a threshold of NaN or 2
    compared as given (nothing retrieved), a changed threshold not saved by save_pretrained."""
    import pandas as pd

    run_dir, export_dir = gate_dirs
    gate = RetrievalGate.from_pretrained(export_dir)
    bad_questions = [
        (pd.DataFrame({"question": TEXTS}), r"a DataFrame.*df\['question'\]"),
        ({t: 1 for t in TEXTS}, "a mapping, whose items are its keys"),
        (TEXTS[0].encode(), "questions is bytes: decode it"),
        ([TEXTS[0].encode()], "question 0 is bytes: decode it"),
    ]
    for questions, message in bad_questions:
        with pytest.raises(InputError, match=message):
            gate.predict_proba(questions)
    assert gate.predict_proba(pd.Series(TEXTS)).shape == (3,)  # a column is its values
    with pytest.raises(InputError, match=r"features views: .* does not read them \(the columns "
                       r"it reads: none: the question text alone\)"):  # fmt: skip
        gate.predict_proba(TEXTS, features={"views": [1, 2, 3]})  # scored as if absent
    with pytest.raises(InputError, match=r"features views: .* does not read them"):
        gate.predict_proba(TEXTS, features=[{"views": 1}, {}, {}])  # one mapping a question
    for kwargs, message in [
        ({"threshold": 0.5}, "unknown argument.*threshold.*set gate.threshold after loading"),
        ({"varient": "int8"}, "unknown argument.*varient"),
        ({"variant": "int4"}, "unknown variant 'int4'"),
        ({"batch_size": 0}, "batch_size must be a whole number of 1 or more, got 0"),
        ({"batch_size": "8"}, "batch_size must be"),
    ]:
        with pytest.raises(InputError, match=message):
            RetrievalGate.from_pretrained(export_dir, **kwargs)
    with pytest.raises(InputError, match="variant='int8' names an export's ONNX file"):
        RetrievalGate.from_pretrained(run_dir, variant="int8")
    for bad in (float("nan"), 2, -1, "0.5", True, None):
        with pytest.raises(InputError, match=r"threshold must be a number in \[0, 1\]"):
            gate.threshold = bad
        if bad is not None:
            with pytest.raises(InputError, match=r"threshold must be a number in \[0, 1\]"):
                gate.predict(TEXTS, threshold=bad)
    assert gate.threshold == pytest.approx(0.42)  # untouched by the refused values
    gate.threshold = np.float32(0.5)
    with pytest.raises(InputError, match="threshold 0.5 was set after loading.*is 0.42"):
        gate.save_pretrained(tmp_path / "changed")
    assert not (tmp_path / "changed").exists()
    gate.threshold = 0.42


def test_save_pretrained_copies_the_gates_files_only_and_expands_home(
    gate_dirs, tmp_path, monkeypatch
):
    """A note of the user's in the export folder went into the copy (and to the Hub with
    push_to_hub); "~/x" made a folder named "~" in the working folder; a source folder gone
    was pathlib's traceback after an empty target was made."""
    _, export_dir = gate_dirs
    mine = tmp_path / "mine"
    shutil.copytree(export_dir, mine)
    (mine / "my_notes.txt").write_text("private")
    gate = RetrievalGate.from_pretrained(mine)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    saved = gate.save_pretrained("~/copy")
    assert saved == tmp_path / "home" / "copy" and not (tmp_path / "~").exists()
    assert "my_notes.txt" not in {p.name for p in saved.iterdir()}
    assert {p.name for p in saved.iterdir()} == {p.name for p in export_dir.iterdir()}
    shutil.rmtree(mine)
    with pytest.raises(InputError, match="the gate's files are gone from .*mine"):
        gate.save_pretrained(tmp_path / "again")
    assert not (tmp_path / "again").exists()
    for bad in (None, "", "  "):
        with pytest.raises(InputError, match="save_directory is"):
            gate.save_pretrained(bad)


def test_torch_save_pretrained_keeps_only_the_gate(gate_dirs, tmp_path):
    from huggingface_hub import ModelCard

    from retrieval_gate.run_folder import RunFolder

    run_dir, _ = gate_dirs
    saved = RetrievalGate.from_pretrained(run_dir, device="cpu").save_pretrained(tmp_path / "run")
    assert (saved / "gate.pt").is_file() and not (saved / "lightning").exists()
    # the run's gate files and the mixin's model card (a run has none of its own); no config.json
    assert {p.name for p in saved.iterdir()} == {*RunFolder.GATE, "README.md"}
    card = ModelCard.load(saved / "README.md")
    assert card.data.library_name == "retrieval-gate" and "retrieval-gate" in card.data.tags
    assert "(0.42)" in card.text and "RetrievalGate.from_pretrained" in card.text
    again = RetrievalGate.from_pretrained(saved, backend="torch", device="cpu")
    assert again.threshold == pytest.approx(0.42)


class FolderHub:
    """Test double for `huggingface_hub.HfApi` (no network): the "Hub" is a local folder.
    `install` puts it where `ModelHubMixin.push_to_hub` gets its `HfApi`."""

    def __init__(self, root: Path):
        self.root, self.created, self.uploads, self.tokens = root, [], [], []

    def install(self, monkeypatch) -> FolderHub:
        import huggingface_hub.hub_mixin

        def api(token=None):
            self.tokens.append(token)
            return self

        monkeypatch.setattr(huggingface_hub.hub_mixin, "HfApi", api)
        return self

    def create_repo(self, repo_id: str, **kw) -> SimpleNamespace:
        self.created.append((repo_id, kw))
        return SimpleNamespace(repo_id=repo_id)

    def upload_folder(self, repo_id: str, folder_path: str, **kw) -> str:
        self.uploads.append((repo_id, sorted(p.name for p in Path(folder_path).iterdir()), kw))
        shutil.copytree(folder_path, self.root / repo_id)
        return f"commit:{repo_id}"


def test_push_to_hub_uploads_what_from_pretrained_loads(gate_dirs, tmp_path, monkeypatch):
    from huggingface_hub import ModelHubMixin

    _, export_dir = gate_dirs
    hub = FolderHub(tmp_path / "hub").install(monkeypatch)
    gate = RetrievalGate.from_pretrained(export_dir)
    assert isinstance(gate, ModelHubMixin)
    assert gate.push_to_hub("acme/gate", private=True, token="t") == "commit:acme/gate"
    assert hub.tokens == ["t"]
    assert hub.created == [("acme/gate", {"private": True, "exist_ok": True})]
    # exactly the export's files (its own README.md, no config.json), one commit, model repo
    [(repo, files, kw)] = hub.uploads
    assert repo == "acme/gate" and kw["repo_type"] == "model"
    assert files == sorted(p.name for p in export_dir.iterdir() if p.is_file())
    assert "config.json" not in files and "README.md" in files
    pulled = RetrievalGate.from_pretrained(tmp_path / "hub" / "acme" / "gate")
    np.testing.assert_allclose(pulled.predict_proba(TEXTS), gate.predict_proba(TEXTS), atol=1e-6)


def test_side_features_ride_in_extra():
    cols = as_questions(["a?", "b?"], {"s_pop": [10.0, 2000.0]})
    assert [q.extra for q in cols] == [{"s_pop": 10.0}, {"s_pop": 2000.0}]
    rows = as_questions("a?", [{"s_pop": 3.0}])
    assert rows[0].extra == {"s_pop": 3.0} and rows[0].source == "api"
    given = Question(id="q", text="c?", answers=(), source="x", extra={"k": 1})
    assert as_questions([given], {"s_pop": [5.0]})[0].extra == {"k": 1, "s_pop": 5.0}
    with pytest.raises(InputError, match="feature 's_pop' has 1 values for 2 questions"):
        as_questions(["a?", "b?"], {"s_pop": [1.0]})
    with pytest.raises(InputError, match="question 1 is ''"):
        as_questions(["a?", ""])
    for nothing in (None, 3, given):  # `predict(None)` was "'NoneType' object is not iterable"
        with pytest.raises(InputError, match="expected a question string or a list of them"):
            as_questions(nothing)


def test_bad_folders_and_backends(gate_dirs, tmp_path):
    run_dir, export_dir = gate_dirs
    with pytest.raises(InputError, match="export it first"):
        RetrievalGate.from_pretrained(run_dir, backend="onnx")
    with pytest.raises(InputError, match="load the training run folder"):
        RetrievalGate.from_pretrained(export_dir, backend="torch")
    with pytest.raises(InputError, match="unknown backend 'tf'"):
        RetrievalGate.from_pretrained(export_dir, backend="tf")
    with pytest.raises(InputError, match="not a Hub id"):
        RetrievalGate.from_pretrained(tmp_path / "missing" / "deep" / "path")
    with pytest.raises(InputError, match="got a file"):
        RetrievalGate.from_pretrained(export_dir / "model.onnx")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="neither an export"):
        RetrievalGate.from_pretrained(tmp_path / "empty")
    for blank in ("", "  "):  # "" was the working folder: an export there loaded silently
        with pytest.raises(InputError, match="the gate's path is empty"):
            RetrievalGate.from_pretrained(blank)
    with pytest.raises(InputError, match="no fp16 model"):
        RetrievalGate.from_pretrained(export_dir, variant="fp16")


def test_unknown_or_unavailable_torch_devices_and_a_file_in_the_save_path(
    gate_dirs, tmp_path, monkeypatch
):
    """device="gpu" was torch's raw RuntimeError and "cuda" on a torch without CUDA an
    AssertionError ("Torch not compiled with CUDA enabled"), where the ONNX backend says which
    provider is missing; a file among the folders of save_pretrained's path was a raw
    NotADirectoryError."""
    import torch

    from retrieval_gate.errors import BackendError

    run_dir, export_dir = gate_dirs
    for device in ("gpu", "tpu", "cuda:x", "meta"):
        with pytest.raises(InputError, match=rf"unknown device '{device}': choose cpu or cuda"):
            RetrievalGate.from_pretrained(run_dir, device=device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:1"):
        with pytest.raises(BackendError, match=rf"device '{device}': CUDA is not available"):
            RetrievalGate.from_pretrained(run_dir, device=device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(BackendError, match=r"'cuda:3': there is no GPU 3 \(torch sees 1\)"):
        RetrievalGate.from_pretrained(run_dir, device="cuda:3")
    assert RetrievalGate.from_pretrained(run_dir, device="CPU").device == "cpu"  # as ONNX's
    gate = RetrievalGate.from_pretrained(export_dir)
    (tmp_path / "a-file").write_text("x")
    for target in ("a-file/sub", "a-file/sub/deeper"):
        with pytest.raises(InputError, match=rf"{target}: .*a-file is a file, not a folder"):
            gate.save_pretrained(tmp_path / target)
    assert (tmp_path / "a-file").read_text() == "x"


class ReadTexts:
    """A gate's tokenizer (either backend's), noting the longest text it was given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.longest = tokenizer, 0

    def __call__(self, texts, **kw):  # transformers' (the run's)
        self.longest = max(self.longest, *map(len, texts))
        return self.tokenizer(texts, **kw)

    def encode_batch(self, texts):  # tokenizers' (the export's)
        self.longest = max(self.longest, *map(len, texts))
        return self.tokenizer.encode_batch(texts)


def test_a_huge_text_is_cut_before_tokenising_on_both_backends(gate_dirs):
    """One 10 MB line took 17 s and 2 GB, tokenised whole before truncation (tens of MB
    killed the process); now cut to max_length x CHARS_PER_TOKEN characters first: its score
    is its start's, the other texts' as they were."""
    from retrieval_gate.gates.encoder import CHARS_PER_TOKEN

    run_dir, export_dir = gate_dirs
    huge = "Who wrote Hamlet, and where was it first staged? " * 20_000  # 1 MB
    for gate in (RetrievalGate.from_pretrained(export_dir),
                 RetrievalGate.from_pretrained(run_dir, device="cpu")):  # fmt: skip
        alone = gate.predict_proba(TEXTS)
        gate.gate.tokenizer = read = ReadTexts(gate.gate.tokenizer)
        got = gate.predict_proba([huge, *TEXTS])
        assert read.longest <= gate.gate.max_length * CHARS_PER_TOKEN < 100_000
        np.testing.assert_allclose(got[1:], alone, atol=1e-5)
        assert got[0] == pytest.approx(gate.predict_proba(huge[:2000]), abs=1e-5)


def test_model_card_front_matter(gate_dirs):
    from huggingface_hub import ModelCard

    _, export_dir = gate_dirs
    card = ModelCard.load(export_dir / "README.md")
    data = card.data
    assert data.library_name == "retrieval-gate" and "onnx" in data.tags
    assert data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert "hyintell/RetrievalQA" in data.datasets
    assert data.decision_threshold == pytest.approx(0.42)
    results = {r.metric_type: r for r in data.eval_results}
    assert {"auroc", "macro_f1", "ece"} <= set(results)
    assert results["macro_f1"].metric_args == {"threshold": 0.5}  # measured in training
    assert results["auroc"].metric_args is None and results["auroc"].dataset_split == "test"
    assert "## Threshold" in card.text and "RetrievalGate.from_pretrained" in card.text


class EchoGenerator:
    """Answers "x" to every prompt (the test is about the gate, not the generation)."""

    name, checksum = "echo", "echo"

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        from retrieval_gate.generation.base import Generation

        return [Generation("x", 1, 1) for _ in prompts]


def test_retrieval_gate_is_a_gate_everywhere_a_gate_goes(gate_dirs, tmp_path):
    """No `.gate` unwrapping: the public object is scored by evaluation, tuned, served by
    `create_app`, and sits in `AdaptiveRAG`; its capabilities are protocol checks."""
    from fastapi.testclient import TestClient

    from retrieval_gate.evaluation.evaluate import evaluate_gate
    from retrieval_gate.gates.base import Gate, HasChecksum, HasMetadata, OnDevice, is_router
    from retrieval_gate.labels.evalset import EvalSet
    from retrieval_gate.rag import AdaptiveRAG
    from retrieval_gate.rag.service import create_app
    from retrieval_gate.retrieval import ContextRetriever
    from retrieval_gate.tuning.threshold_studies import tune_gate_thresholds

    gate = RetrievalGate.from_pretrained(gate_dirs[1])
    assert isinstance(gate, Gate) and not is_router(gate)
    assert all(isinstance(gate, p) for p in (HasChecksum, HasMetadata, OnDevice))
    assert gate.checksum == gate.gate.checksum and gate.name == gate.gate.name
    qs = [Question(id=f"x{i}", text=t, answers=("a",), source="mine") for i, t in enumerate(TEXTS)]
    evalset = EvalSet(tuple(qs), np.array([0, 1, 0]), np.ones(3), np.ones(3))
    result = evaluate_gate(gate, evalset, 20)
    np.testing.assert_allclose(result.scores, gate.predict_proba(TEXTS), atol=1e-6)
    tuned = tune_gate_thresholds(gate, evalset, evalset, "p", ["macro-f1"], tmp_path / "s.db",
                                 tmp_path, identity=gate.checksum)  # fmt: skip
    assert tuned["gate"] == gate.name and "macro-f1" in tuned["thresholds"]
    with TestClient(create_app(gate)) as client:
        body = client.post("/score", json={"questions": TEXTS[:1]}).json()
    assert body["gate"] == gate.name and body["threshold"] == pytest.approx(0.42)
    answers = AdaptiveRAG(gate, ContextRetriever(), EchoGenerator()).answer(qs)
    assert [a.probability for a in answers] == pytest.approx(result.scores.tolist(), abs=1e-6)
    gate.threshold = 0.9  # a per-mode override reaches the wrapped gate
    assert gate.gate.threshold == 0.9 and gate.threshold == 0.9


def test_every_gate_takes_bare_strings(gate_dirs):
    """`OnnxGate(dir).scores(["..."])` (the README's call) and the baselines take strings."""
    from retrieval_gate.gates.learned import LearnedGate
    from retrieval_gate.gates.trivial import always_gate

    run_dir, export_dir = gate_dirs
    onnx_scores = OnnxGate(export_dir).scores(TEXTS)
    assert onnx_scores.shape == (3,)
    np.testing.assert_allclose(LearnedGate(run_dir).scores(TEXTS), onnx_scores, atol=1e-4)
    assert always_gate().scores(TEXTS).tolist() == [1.0, 1.0, 1.0]


def test_router_protocol_is_a_gate_with_strategies():
    from retrieval_gate.gates.base import Gate, Router, is_router
    from retrieval_gate.gates.trivial import always_gate

    class TwoStep:
        name, threshold, strategies = "two-step", 0.5, ("no_retrieval", "one_retrieval")

        def scores(self, questions):
            return 1 - self.strategy_proba(questions)[:, 0]

        def strategy_proba(self, questions):
            return np.tile([0.3, 0.7], (len(questions), 1))

        def route(self, questions, budget=None):
            return ["one_retrieval"] * len(questions)

    router = TwoStep()
    assert isinstance(router, Router) and isinstance(router, Gate) and is_router(router)
    assert not is_router(always_gate())


def test_a_run_missing_a_backbone_file_or_with_a_folder_for_its_weights_is_named(
    gate_dirs, tmp_path
):
    """Bug 4: a run whose backbone/ lacks a file its manifest records was a raw
    FileNotFoundError (the tokenizer/'s was named), and gate.pt replaced by a folder a raw
    IsADirectoryError: both are DataErrors naming the file now, worded as the tokenizer's."""
    import os

    run_dir, _ = gate_dirs
    no_config = shutil.copytree(run_dir, tmp_path / "no-config", copy_function=os.link)
    (no_config / "backbone" / "config.json").unlink()  # the link: the shared run keeps its own
    with pytest.raises(InputError, match=r"no-config: the run's backbone/ lacks config.json, "
                       r"which its manifest records; re-train it"):  # fmt: skip
        RetrievalGate.from_pretrained(no_config)
    weights_folder = shutil.copytree(run_dir, tmp_path / "weights-folder", copy_function=os.link)
    (weights_folder / "gate.pt").unlink()
    (weights_folder / "gate.pt").mkdir()
    with pytest.raises(InputError, match=r"the run's gate.pt is a folder, not a file; re-train"):
        RetrievalGate.from_pretrained(weights_folder)


def test_a_gate_loaded_from_a_relative_path_is_found_from_any_working_folder(
    gate_dirs, tmp_path, monkeypatch
):
    """Its folder was kept relative: unpickled (a worker) or saved after a chdir, it was "no
    such folder, and not a Hub id" / "the gate's files are gone"."""
    import pickle

    shutil.copytree(gate_dirs[1], tmp_path / "here" / "gate")
    monkeypatch.chdir(tmp_path / "here")
    gate = RetrievalGate.from_pretrained("gate")
    assert gate.folder == tmp_path / "here" / "gate" and gate.folder.is_absolute()
    blob = pickle.dumps(gate)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert pickle.loads(blob).folder == gate.folder
    assert (gate.save_pretrained(tmp_path / "copy") / "model.onnx").is_file()


def test_a_pickled_or_copied_gate_keeps_its_device_and_batch_size(gate_dirs):
    """Its copies were loaded with backend, variant and threshold only: batch_size=4 came back
    64, and device="cpu" (the GPU left to the LLM) came back on CUDA where there is one."""
    import copy
    import pickle

    gate = RetrievalGate.from_pretrained(gate_dirs[1], batch_size=4, device="cpu")
    for copied in (pickle.loads(pickle.dumps(gate)), copy.deepcopy(gate)):
        assert copied.gate.batch_size == 4 and copied.device == "CPUExecutionProvider"
        assert copied.load_options == gate.load_options == {"device": "cpu", "batch_size": 4}


class SideGate:
    """A gate reading the side column `hits` (as a `data.features` gate): its score is the
    number of rows that have a value for it."""

    name, threshold = "side", 0.5
    side_features = SimpleNamespace(names=("hits",), from_text=False)

    def scores(self, questions):
        return np.array([0.0 if q.extra.get("hits") is None else 1.0 for q in questions])


def test_features_given_as_an_iterator_of_rows_are_checked_as_a_list_is(tmp_path):
    """A column the gate does not read was refused in a list of rows and silently ignored in
    a generator of the same rows (it was not read, to leave it to the scoring)."""
    gate = RetrievalGate(SideGate(), tmp_path, "onnx")
    rows = [{"hits": 1, "views": 9}, {"hits": None, "views": 2}]
    for given in (rows, iter(rows), (dict(r) for r in rows)):
        with pytest.raises(InputError, match=r"features views: 'side' does not read them"):
            gate.predict_proba(TEXTS[:2], features=given)
    kept = [{"hits": 1}, {"hits": None}]
    for given in (kept, iter(kept), (dict(r) for r in kept)):  # read once, then scored
        assert gate.predict_proba(TEXTS[:2], features=given).tolist() == [1.0, 0.0]


def test_questions_features_and_answers_that_would_be_misread_are_refused(tmp_path):
    """A set of questions was scored in its arbitrary order (scores matched to no question),
    features="popularity" split into its characters ("10 rows for 2 questions"), and one
    number as token_logprobs for a list of questions a raw TypeError (not iterable)."""
    gate = RetrievalGate(SideGate(), tmp_path, "onnx")
    for questions in (set(TEXTS), frozenset(TEXTS)):
        with pytest.raises(InputError, match=r"whose order is arbitrary.*ordered sequence"):
            gate.predict_proba(questions)
    assert len(as_questions(dict.fromkeys(TEXTS).keys())) == 3  # insertion order: kept
    for text in ("popularity", b"hits"):
        with pytest.raises(InputError, match=r"features is .*, a text: give a mapping"):
            as_questions(TEXTS[:2], text)
    for number in (5, -0.5, np.float64(-1.0), "[-0.1]", {"a": 1}):
        with pytest.raises(InputError, match=r"token_logprobs: .* is not a list of log-prob"):
            as_questions(TEXTS[:2], token_logprobs=number)
    assert as_questions(TEXTS[:2], token_logprobs=[[-0.1], None])[1].extra == {
        "token_logprobs": None
    }


def test_a_router_names_its_own_class_and_load_arguments_are_checked_first(tmp_path):
    """A loaded router's repr said RetrievalGate(...); variant=["int8"] was a raw TypeError
    (unhashable) and device=1 an ONNX export's raw AttributeError (device=0: the default)."""
    from retrieval_gate.gates.onnx import select_providers
    from retrieval_gate.gates.pretrained import RetrievalRouter

    class TwoStep:
        name, threshold, strategies = "two-step", 0.5, ("no_retrieval", "one_retrieval")

        def scores(self, questions):
            return np.full(len(questions), 0.5)

        def strategy_proba(self, questions):
            return np.tile([0.3, 0.7], (len(questions), 1))

        def route(self, questions, budget=None):
            return ["one_retrieval"] * len(questions)

    assert repr(RetrievalRouter(TwoStep(), tmp_path, "onnx")).startswith("RetrievalRouter(")
    for variant in (["int8"], {}):
        with pytest.raises(InputError, match=r"unknown variant .*; choose from fp32"):
            RetrievalGate.from_pretrained(tmp_path, variant=variant)
    for device in (1, 0, True, ["cpu"]):
        with pytest.raises(InputError, match=r"unknown device .*: choose cpu or cuda"):
            RetrievalGate.from_pretrained(tmp_path, device=device)
        with pytest.raises(InputError, match=r"unknown device .*: choose cpu or cuda"):
            select_providers(["CPUExecutionProvider"], device)


def test_a_numpy_integer_batch_size_is_taken_as_an_int(gate_dirs):
    """batch_size=np.int64(8) (a threshold or budget of numpy's is taken) was refused as
    "not a whole number"."""
    gate = RetrievalGate.from_pretrained(gate_dirs[1], batch_size=np.int64(8))
    assert gate.gate.batch_size == 8 and type(gate.load_options["batch_size"]) is int
    for bad in (np.int64(0), np.float64(8.0), True):
        with pytest.raises(InputError, match="batch_size must be a whole number of 1 or more"):
            RetrievalGate.from_pretrained(gate_dirs[1], batch_size=bad)
