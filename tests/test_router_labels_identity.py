"""A trained router's stored calibration curve belongs to the labels it was trained on, and a
release is read from its three strategies' folders only.

- `tune` read a router's stored out-of-fold train+dev curve whatever `--labels` said: a release
  rewritten under the same folder names (other outcomes) got the old labels' train+dev figures
  and prices beside the new labels' test figures, exit 0, no word. It is refused now, naming
  both checksums; `evaluate` (where judging a router on other labels is a use) still scores it,
  says so, and names its matching row for the labels its curve was read on.
- A fourth strategy's folders (`flare_qa_<llm>_*`) or a misspelt prefix (`IRCoT_qa_*`) in a
  release were skipped unsaid; a warning names them now, once."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from retrieval_gate.data.adaptive_rag import find_release, release_root
from retrieval_gate.errors import DataError
from retrieval_gate.gates.registry import GateOptions
from retrieval_gate.labels.evalset import load_splits
from retrieval_gate.labels.strategy_labels import load_strategy_labels, strategy_labels_sha256
from retrieval_gate.pricing import Calibration, route_indices
from routers import COSTS, STRATEGIES
from user_files import placeholder_weights

OOF = "out-of-fold train+dev"


def _release(folder: Path, flip: bool = False) -> Path:
    """A copy of the bundled release; `flip`: the same folder names, the no-retrieval
    outcomes turned over (each question right where it was wrong, and the reverse)."""
    shutil.copytree(release_root(), folder)
    if flip:
        for nor in folder.glob("predictions/*/nor_qa_*"):
            right = next(nor.glob("zero_single_multi_classification__*.json"))
            ids = json.loads(next(p for p in nor.glob("prediction__*.json")
                                  if not p.name.endswith("_chains.json")).read_text())  # fmt: skip
            was = json.loads(right.read_text())
            right.write_text(json.dumps({i: ["zero"] for i in ids if i not in was}))
    return folder


def _sha(labels: Path) -> str:
    return strategy_labels_sha256(load_strategy_labels(labels))


class StandIn:
    """A trained router as a run (`run_dir`, its labels.json) or an export (`metadata`'s
    label_provenance) carries it: P(correct | strategy) from a hash of the text, calibrated
    on the out-of-fold train+dev of the labels it was 'trained' on."""

    threshold = 0.5
    checksum = "stand-in-router"

    def __init__(self, trained_on: Path, run_dir: Path, export: bool = False):
        sp = load_splits(trained_on, None)
        qs = [*sp.train.questions, *sp.dev.questions]
        correct = np.r_[sp.train.correct, sp.dev.correct]
        self.calibration = Calibration.fit(STRATEGIES, COSTS, self.strategy_proba(qs), correct,
                                           calibrated_on=OOF)  # fmt: skip
        self.strategies = self.calibration.strategies
        provenance = {"path": str(trained_on), "sha256": _sha(trained_on)}
        if export:
            self.name, self.path = "onnx:stand-in:fp32", run_dir / "model.onnx"
            self.metadata = {"label_provenance": json.dumps(provenance)}
        else:
            self.name, self.run_dir, self.metadata = "learned:stand-in", run_dir, {}
        (run_dir / "labels.json").write_text(json.dumps(provenance))

    def strategy_proba(self, questions) -> np.ndarray:
        digest = [hashlib.sha256(q.text.encode()).digest()[:3] for q in questions]
        return np.array([[b / 255 for b in d] for d in digest])

    def scores(self, questions) -> np.ndarray:
        return 1 - self.strategy_proba(questions)[:, 0]

    def route(self, questions, budget=None) -> list[str]:
        P, cal = self.strategy_proba(questions), self.calibration
        return [self.strategies[i] for i in route_indices(P, cal.price(budget), cal.costs)]


def _run(folder: Path) -> Path:
    """A run folder whose files say "router" (placeholder weights: the stand-in scores)."""
    folder.mkdir(parents=True, exist_ok=True)
    placeholder_weights(folder / "gate.pt")
    cal = Calibration.fit(STRATEGIES, COSTS, np.full((4, 3), 0.5), np.eye(4, 3))
    meta = {"task": "strategies", "router": cal.to_dict()}
    (folder / "metadata.json").write_text(json.dumps(meta))
    return folder


@pytest.fixture(scope="module")
def releases(tmp_path_factory) -> tuple[Path, Path]:
    """(the release a router was trained on, the same folder names with other outcomes)."""
    root = tmp_path_factory.mktemp("releases")
    return _release(root / "A"), _release(root / "B", flip=True)


def test_the_flipped_release_is_other_labels_under_the_same_names(releases):
    a, b = releases
    assert sorted(p.name for p in a.glob("predictions/*/*")) == sorted(
        p.name for p in b.glob("predictions/*/*"))  # fmt: skip
    assert _sha(a) != _sha(b)


@pytest.mark.parametrize("export", [False, True], ids=["run", "export"])
def test_tune_refuses_a_stored_curve_of_other_labels(tmp_path, releases, monkeypatch, export):
    """The hunter's case: trained on A, tuned on B (A's folder names, other outcomes). The old
    code wrote A's out-of-fold figures and price beside B's test figures, exit 0."""
    from retrieval_gate.tuning import threshold_studies
    from retrieval_gate.tuning.tune import TuneConfig, run_tuning

    a, b = releases
    run = _run(tmp_path / "run")
    router = StandIn(a, run, export)
    monkeypatch.setattr(threshold_studies, "build_for_tuning", lambda *args, **kw: router)

    def tune(labels: Path, out: str) -> Path:
        options = GateOptions(learned_run=str(run))
        cfg = TuneConfig(gate="learned", labels=labels, objectives=["budget-accuracy"],
                         out=tmp_path / out, gate_options=options)  # fmt: skip
        return run_tuning(cfg)[0]

    with pytest.raises(DataError) as e:
        tune(b, "other")
    said = str(e.value)
    assert _sha(a)[:12] in said and _sha(b)[:12] in said
    assert str(a) in said and str(b) in said and "Retrain the router on these labels" in said
    assert f"--labels {a}" in said  # the labels it was trained on
    assert not list((tmp_path / "other").glob("tune-router-*"))
    report = json.loads(tune(a, "same").with_suffix(".json").read_text())
    assert report["swept"] == OOF and report["chosen"]  # its own labels: as before


def test_a_rewritten_label_folder_is_told_to_be_restored(tmp_path, releases):
    """Trained on a folder later rewritten in place: the same path, another checksum."""
    from retrieval_gate.tuning.router_budgets import other_labels

    _, b = releases
    here = _release(tmp_path / "rel")
    router = StandIn(here, _run(tmp_path / "run"))
    assert other_labels(router, here) is None
    shutil.rmtree(here)
    shutil.copytree(b, here)
    _, fix = other_labels(router, here)
    assert fix == f"{here} as it was when the router trained: restore it"


def test_evaluate_scores_a_router_on_other_labels_and_says_whose_curve(
    tmp_path, releases, monkeypatch, caplog
):
    """Judging a router on other labels is a use (another LLM's outcomes, other questions):
    it is scored, with a warning naming both checksums, and its matching row, priced on its
    stored curve, says that curve is of the labels it was trained on (it read as these)."""
    from retrieval_gate.evaluation import gate_comparison
    from retrieval_gate.evaluation.gate_comparison import EvaluationConfig, run_evaluation

    a, b = releases
    run = _run(tmp_path / "run")
    router = StandIn(a, run)
    monkeypatch.setattr(gate_comparison, "build_gate", lambda *args, **kw: router)
    cfg = EvaluationConfig(gates=["learned"], label_files=[b, a], out_dir=tmp_path / "ev",
                           gate_options=GateOptions(learned_run=str(run)), n_resamples=10,
                           measure_cost=False)  # fmt: skip
    with caplog.at_level("WARNING"):
        run_evaluation(cfg)  # both label files in one report: a section each
    report = json.loads((tmp_path / "ev" / "results.json").read_text())
    rows = {name[-1]: [r["policy"] for r in policy["routing"]["policies"]
                       if r["policy"].startswith("learned @")]
            for name, policy in report["policies"].items()}  # fmt: skip
    assert any(f"on {OOF} of the labels it was trained on" in p for p in rows["B"]), rows
    assert any(f"on {OOF}" in p for p in rows["A"]), rows  # its own labels: as before
    assert not any("of the labels it was trained on" in p for p in rows["A"])
    said = [r.getMessage() for r in caplog.records if "trained and calibrated" in r.getMessage()]
    assert len(said) == 1 and _sha(a)[:12] in said[0] and _sha(b)[:12] in said[0]


# ---------------------------------------------------------------- a release's unread folders


def test_a_fourth_strategy_s_folders_are_named_not_skipped_unsaid(tmp_path, capsys):
    """`label --policy outcomes` on a release with `flare_qa_<llm>_*` folders and a misspelt
    `IRCoT_qa_*` one imported the three strategies, exit 0, empty stderr."""
    from retrieval_gate.cli import main

    rel = _release(tmp_path / "rel4")
    split = next(rel.glob("predictions/*"))
    for src in split.glob("oner_qa_*_nq____*"):
        shutil.copytree(src, split / src.name.replace("oner_", "flare_"))
        shutil.copytree(src, split / src.name.replace("oner_", "IRCoT_"))
    argv = ["label", "--policy", "outcomes", "--outcomes", str(rel),
            "--labels-dir", str(tmp_path / "labels")]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("folder(s) not read") == 1, err  # once, though the release is read twice
    assert "2 folder(s) not read: IRCoT_qa_llama_8b_it_nq____" in err
    assert "flare_qa_llama_8b_it_nq____" in err and "--strategies" in err
    assert "<nor|oner|ircot>_qa_<llm>_<dataset>____*" in err
    meta = json.loads(next((tmp_path / "labels").glob("*/strategies.meta.json")).read_text())
    assert meta["strategies"] == list(STRATEGIES)  # what is read is as before


def test_a_release_of_the_three_strategies_alone_says_nothing(caplog):
    with caplog.at_level("WARNING"):
        find_release(release_root())
    assert "not read" not in caplog.text


@pytest.mark.slow  # trains a (tiny) stacked router, then tune and evaluate load it
def test_a_trained_router_run_is_tuned_only_on_its_own_labels(tmp_path, releases, capsys):
    """The hunter's commands, on a real run: `train` on release A, then `tune` on B (A's
    folder names, other outcomes) is refused with both checksums, `tune` on A is as before,
    and `evaluate` on B scores it, its matching row named for A."""
    from retrieval_gate.cli import main
    from tiny_backbones import tiny_release_router_sets

    a, b = releases
    sets = [*tiny_release_router_sets(tmp_path / "body"), f"data.label_file={a}",
            f"run.output_dir={tmp_path}", "run.name=qX"]  # fmt: skip
    assert main(["train", "--config", "router-adaptive-rag-llama8b", "--set", *sets]) == 0
    run = tmp_path / "qX"
    assert json.loads((run / "labels.json").read_text())["sha256"] == _sha(a)
    tune = ["tune", "--gate", "learned", "--learned-run", str(run), "--objective",
            "budget-accuracy", "--budget", "1"]  # fmt: skip
    capsys.readouterr()
    assert main([*tune, "--labels", str(b), "--out", str(tmp_path / "tuB")]) == 2
    err = capsys.readouterr().err
    assert _sha(a)[:12] in err and _sha(b)[:12] in err and f"--labels {a}" in err
    assert main([*tune, "--labels", str(a), "--out", str(tmp_path / "tuA")]) == 0
    evaluate = ["evaluate", "--labels", str(b), "--gates", "learned", "--learned-run", str(run),
                "--no-cost", "--resamples", "10", "--out", str(tmp_path / "evB")]  # fmt: skip
    assert main(evaluate) == 0
    assert _sha(a)[:12] in capsys.readouterr().err
    report = (tmp_path / "evB" / "report.md").read_text()
    assert f"on {OOF} of the labels it was trained on" in report
