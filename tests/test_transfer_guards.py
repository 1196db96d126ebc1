"""`transfer --learned`'s cells: keyed by the side features' values, a cell left with one
label said (not an error that stopped the matrix), and paths and source names taken literally
(a ` #`, a `: ` or `../` in them)."""

from __future__ import annotations

import json

import pytest

from retrieval_gate.cli import main
from retrieval_gate.evaluation import transfer  # scipy, sklearn, matplotlib: at collection
from retrieval_gate.questions import Question
from retrieval_gate.training.config import load_config

SPLITS = ("train",) * 6 + ("dev",) * 2 + ("test",) * 2


def _rows(sources, one_label=()):
    """(id, text, source, split, label) rows: 20 questions a source, labels alternating (the
    sources in `one_label` all 1); texts a tiny body can tell apart."""
    rows = []
    for s, source in enumerate(sources):
        for i in range(20):
            y = 1 if source in one_label else i % 2
            word = "zorblat quenvik" if y else "capital france"
            rows.append((f"s{s}q{i}", f"what is the {word} of item {s} {i}?", source,
                         SPLITS[i % 10], y))  # fmt: skip
    return rows


def _files(folder, rows, labels_name="lab.jsonl"):
    """A question CSV (its own split column) and a label file of `rows`."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["id,question,answer,source,split"]
    lines += [f'{i},{t},x,"{s}",{sp}' for i, t, s, sp, _ in rows]
    questions = folder / "q.csv"
    questions.write_text("\n".join(lines) + "\n")
    labels = folder / labels_name
    labels.parent.mkdir(parents=True, exist_ok=True)
    labels.write_text("".join(json.dumps({"id": i, "label": y}) + "\n" for i, *_, y in rows))
    return questions, labels


def _tiny_sets(folder, rows):
    from tiny_backbones import tiny_body_sets

    body = tiny_body_sets(folder, [r[1] for r in rows])
    return [*body, "trainer.max_epochs=1", "data.max_length=24"]


def test_a_cells_key_changes_with_its_side_features_values(tmp_path):
    """The key hashed the questions' ids, texts and splits only: changed `data.features`
    values (the `views` column) reused the runs trained on the old ones, unsaid."""
    labels = tmp_path / "lab.jsonl"
    labels.write_text('{"id": "q0", "label": 1}\n{"id": "q1", "label": 0}\n')

    def key(views, features="[views]"):
        qs = [Question(f"q{i}", f"Q{i}?", ("x",), "a", split="train", extra={"views": v})
              for i, v in enumerate(views)]  # fmt: skip
        sets = [f"data.label_file={labels}", f"data.features={features}"]
        return transfer.cell_key(load_config("minilm", sets), qs)

    assert key([1, 2]) == key([1, 2])
    assert key([1, 2]) != key([1, 3])  # other values: another cell
    assert key([1, 2], "null") == key([1, 3], "null")  # a column no gate reads: the same


def test_a_learned_cell_left_with_one_label_is_a_cell_that_cannot_fit(tmp_path):
    """Without a source, the other sources' training (or monitored dev) questions of one label
    made training raise (exit 2, no report) where tfidf's cell said "cannot fit": the learned
    gate's cells say it too, before anything trains."""
    from retrieval_gate.labels.evalset import load_splits

    rows = _rows(["alpha", "beta"], one_label=("alpha", "beta"))  # every cell: one label
    _, labels = _files(tmp_path / "all-one", rows)
    qs = [Question(i, t, ("x",), s, split=sp) for i, t, s, sp, _ in rows]
    runs = tmp_path / "runs"
    fit = transfer.learned_fitter({"lab": labels}, "minilm", [], runs, qs)
    cells = transfer.transfer_cells(load_splits(labels, None, qs), "lab", {"learned": fit})
    assert len(cells) == 4 and all(c.note.startswith("cannot fit") for c in cells)
    notes = {c.note.split(" question")[0] for c in cells}
    assert notes == {"cannot fit: with every source: every training",
                     "cannot fit without alpha: without 'alpha': every training",
                     "cannot fit without beta: without 'beta': every training"}  # fmt: skip
    assert not runs.exists()  # nothing trained

    rows = _rows(["alpha", "beta"], one_label=("beta",))
    _, labels = _files(tmp_path, rows)
    qs = [Question(i, t, ("x",), s, split=sp) for i, t, s, sp, _ in rows]
    config = load_config("minilm", [f"data.label_file={labels}"])
    transfer._fittable([q for q in qs if q.source != "beta"], "beta", config)  # both labels
    dev_one = [q for q in qs if q.source == "alpha" and (q.split != "dev" or q.id[-1] in "13579")]
    with pytest.raises(transfer.CANNOT_FIT, match="the dev split's .* all need retrieval"):
        transfer._fittable(dev_one, "beta", config)
    loss = load_config("minilm", [f"data.label_file={labels}", "early_stopping.monitor=val/loss",
                                  "early_stopping.mode=min"])  # fmt: skip
    transfer._fittable(dev_one, "beta", loss)  # a monitor one class leaves defined


@pytest.mark.slow  # trains two tiny-body cells
def test_the_matrix_goes_on_past_a_learned_cell_of_one_label(tmp_path):
    """`--learned` stopped the whole matrix (exit 2, no report) once a held-out cell's
    training questions were all of one label: that cell is n/a, the others trained."""
    rows = _rows(["alpha", "beta"], one_label=("beta",))
    questions, labels = _files(tmp_path, rows)
    out, runs = tmp_path / "report", tmp_path / "runs"
    code = main(["transfer", "--questions", str(questions), "--labels", str(labels),
                 "--gates", "tfidf", "--learned", "--learned-out", str(runs), "--out", str(out),
                 "--learned-set", *_tiny_sets(tmp_path / "b", rows)])  # fmt: skip
    assert code == 0
    cells = {(c["setting"], c["source"]): c for c in json.loads((out / "transfer.json")
             .read_text()) if c["gate"] == "learned"}  # fmt: skip
    assert cells["held-out", "alpha"]["note"].startswith("cannot fit without alpha")
    assert cells["held-out", "beta"]["accuracy"] == cells["held-out", "beta"]["accuracy"]
    assert cells["in-domain", "alpha"]["auroc"] is not None
    assert len([p for p in runs.iterdir() if (p / "gate.pt").is_file()]) == 2


def test_any_source_value_names_a_folder_of_its_own():
    """`../esc` or `x: y` was refused as a run.name the user never set, after the in-domain
    cell had trained: a source that is no plain folder name is a slug and a hash."""
    from retrieval_gate.fileio import plain_name

    plain = ["alpha", "help-desk_2", "v1.2"]
    assert [transfer.folder_part(s) for s in plain] == plain
    odd = ["../esc", "x: y", "help #1", "help #2", ".hidden", "é", "/", "a/b", "a\\b"]
    parts = [transfer.folder_part(s) for s in odd]
    assert len(set(parts)) == len(odd)
    for part in parts:
        assert plain_name(f"transfer-lab-without-{part}-0123456789ab", "run.name")
    assert parts[0].startswith("esc-") and parts[2].startswith("help-1-")


@pytest.mark.slow  # trains three tiny-body cells a case
@pytest.mark.parametrize(
    ("sources", "labels_name", "learned_out"),
    [
        (["help #1", "help #2"], "exp #2/lab.jsonl", "cz #1"),
        (["x: y", "../esc"], "lab.jsonl", "ck"),
    ],
)
def test_paths_and_sources_are_taken_literally(sources, labels_name, learned_out, tmp_path):
    """The learned cells' paths and run names went through `--set` as YAML: `--learned-out
    'cz #1'` trained into ./cz, a source `help #1` shared one folder with `help #2`, `--labels
    'exp #2/lab.jsonl'` was a traceback (FileNotFoundError: 'exp'); a source `x: y` was a
    mapping and `../esc` a refused run.name, after the in-domain cell had trained."""
    rows = _rows(sources)
    questions, labels = _files(tmp_path, rows, labels_name)
    out, runs = tmp_path / "report", tmp_path / learned_out
    code = main(["transfer", "--questions", str(questions), "--labels", str(labels),
                 "--gates", "tfidf", "--learned", "--learned-out", str(runs), "--out", str(out),
                 "--learned-set", *_tiny_sets(tmp_path / "b", rows)])  # fmt: skip
    assert code == 0
    cells = [c for c in json.loads((out / "transfer.json").read_text()) if c["gate"] == "learned"]
    assert len(cells) == 4 and all(c["auroc"] is not None for c in cells)
    trained = sorted(p.name[:-13] for p in runs.iterdir() if (p / "gate.pt").is_file())
    assert len(trained) == 3 and "transfer-lab-without-nothing" in trained
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(("cz", "ck"))] == [
        learned_out]  # fmt: skip
