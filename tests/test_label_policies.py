"""The label-policy registry (issue 36 part 6): every policy is a `PolicySpec`, `label`'s
`--policy` choices and policy flags are generated from the registry, and a flag given to a
policy that does not read it is refused, naming the flag and the policies that read it,
before any engine starts. No model is loaded here."""

from __future__ import annotations

import pytest

from retrieval_gate.cli import build_parser, main
from retrieval_gate.errors import InputError
from retrieval_gate.labelling import POLICIES
from retrieval_gate.labels.policies import LabelRequest, label
from retrieval_gate.labels.policy_registry import (
    PolicyOption,
    PolicySpec,
    policies_reading,
    register_policy,
)
from test_bad_options import ENGINES, _started


@pytest.fixture
def no_engine(monkeypatch):
    for target in ENGINES:
        try:
            monkeypatch.setattr(target, _started)
        except (ImportError, AttributeError):  # an optional extra (uvicorn) not installed
            pass


def _label_parser():
    return build_parser(["label"])._subparsers._group_actions[0].choices["label"]


def _actions():
    return {flag: a for a in _label_parser()._actions for flag in a.option_strings}


def _options() -> dict[str, PolicyOption]:
    return {opt.flag: opt for spec in POLICIES.values() for opt in spec.options}


def test_policy_choices_are_the_registry():
    assert list(_actions()["--policy"].choices) == list(POLICIES)
    # the RAG loop's policy comes from the labelling layer, registered like any other
    assert POLICIES["strategies"].needs_rag_loop and not POLICIES["closed-book"].needs_rag_loop


def test_every_policy_option_is_a_flag_with_help_naming_its_policies():
    actions = _actions()
    for flag, opt in _options().items():
        assert flag in actions, flag
        action = actions[flag]
        assert action.dest == opt.name and action.default in (None, False)  # not given: seen
        users = policies_reading(opt.name)
        assert f"[--policy {', '.join(users)}]" in action.help, (flag, action.help)
        if opt.choices:
            assert tuple(action.choices) == opt.choices


def test_a_registered_policy_gets_its_flags(monkeypatch):
    """Plugin-style: a policy registered from outside labels/ brings its own flag."""
    extra = PolicySpec("echo-test", "a test policy", lambda *a: {}, options=(
        PolicyOption("echo_level", "how loud", type=int, default=3, least=0),))  # fmt: skip
    monkeypatch.setitem(POLICIES, "echo-test", extra)
    actions = _actions()
    assert "echo-test" in actions["--policy"].choices
    assert actions["--echo-level"].help == "how loud (default 3) [--policy echo-test]"
    with pytest.raises(Exception, match="registered twice"):
        register_policy(PolicySpec("echo-test", "another", lambda *a: {}))


def _value(opt: PolicyOption, tmp_path) -> list[str]:
    if opt.switch:
        return []
    if opt.choices:
        return [str(opt.choices[0])]
    if opt.type is int:
        return ["1"]
    if opt.type is float:
        return ["0.5"]
    path = tmp_path / "given.jsonl"
    path.write_text("{}\n")
    return [str(path)]


def _wrong_pairs():
    for flag, opt in _options().items():
        for policy in POLICIES:
            if not POLICIES[policy].reads(opt.name):
                yield policy, flag


@pytest.mark.parametrize("policy, flag", list(_wrong_pairs()))
def test_a_flag_the_policy_does_not_read_is_refused_before_any_engine(
    policy, flag, tmp_path, capsys, no_engine
):
    opt = _options()[flag]
    argv = ["label", "--policy", policy, flag, *_value(opt, tmp_path)]
    assert main([*argv, "--labels-dir", str(tmp_path / "labels")]) == 2
    err = capsys.readouterr().err
    assert f"{flag} does not go with --policy {policy}" in err, err
    for user in policies_reading(opt.name):
        assert f"--policy {user}" in err
    assert "engine started" not in err and not (tmp_path / "labels").exists()


def test_python_api_refuses_an_option_the_policy_does_not_read(tmp_path, no_engine):
    req = LabelRequest("closed-book", ["popqa"], limit=2, out=tmp_path / "cb.jsonl",
                       options={"retriever": "contexts"})  # fmt: skip
    with pytest.raises(InputError, match="--retriever does not go with --policy closed-book"):
        label(req)
    assert not (tmp_path / "cb.jsonl").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--policy", "rag-gain", "--k", "0"], "--k must be at least 1"),
        (["--policy", "rrcp", "--t-com", "nan"], "--t-com must be a number in [0, 1]"),
        (["--policy", "outcomes"], "--policy outcomes needs --outcomes FILE"),
        (["--policy", "strategies", "--chunk-size", "0"], "--chunk-size must be at least 1"),
        (["--policy", "strategies", "--relabel"], "it works on closed-book, rag-gain, rrcp"),
        (["--policy", "rrcp", "--engine", "ray"], "--engine ray does not go with --policy rrcp"),
    ],
)
def test_option_values_are_checked_from_the_spec(argv, message, tmp_path, capsys, no_engine):
    assert main(["label", *argv, "--labels-dir", str(tmp_path / "labels")]) == 2
    err = capsys.readouterr().err
    assert message in err and "engine started" not in err, err


def test_defaults_come_from_the_spec():
    """The strategies policy's chunks are smaller; `--help` says both defaults."""
    req = LabelRequest("strategies")
    assert req.value("chunk_size") == 64 and LabelRequest("closed-book").value("chunk_size") == 512
    assert "(default 512; strategies: 64)" in _actions()["--chunk-size"].help


def test_docs_table_matches_the_registry():
    """docs/label.md's table of policies and the flags each reads is the registry's."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "label.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w-]+)` \| .*? \| (.*) \|$", text, flags=re.M)
    table = {name: set(re.findall(r"`(--[\w-]+)`", flags)) for name, flags in rows}
    assert table == {n: {o.flag for o in s.options} for n, s in POLICIES.items()}
    for name, spec in POLICIES.items():
        assert f"`{spec.path('<generator>', Path('<labels-dir>')).as_posix()}`" in text, name


@pytest.mark.parametrize(
    ("bounds", "value", "message"),
    [
        ({"most": 1.0}, 2.0, "--x must be at most 1, got 2"),
        ({"least": 1}, 0, "--x must be at least 1, got 0"),
        ({"least": 0.0, "most": 1.0}, -1.0, r"--x must be a number in \[0, 1\], got -1"),
        ({"least": 0.0, "most": 1.0}, float("nan"), r"--x must be a number in \[0, 1\], got nan"),
    ],
)
def test_an_option_outside_its_bounds_is_refused_whichever_bounds_it_has(bounds, value, message):
    """A bound on one side only (an upper one included) is checked, NaN never passes."""
    with pytest.raises(InputError, match=message):
        PolicyOption("x", "h", **bounds).validate(value)
    PolicyOption("x", "h", **bounds).validate(1.0 if "least" in bounds else 0.5)


class _WordsGenerator:
    """A windowed stand-in: a prompt's words are its tokens; answers "Paris"."""

    name, checksum, context_window = "words", "none", 240

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def prompt_lengths(self, prompts):
        return [len(p.split()) for p in prompts]

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        from retrieval_gate.generation.base import Generation

        self.prompts += prompts
        return [Generation("Paris", len(p.split()), 1) for p in prompts]

    def choice_probs(self, prompts, choices):
        raise AssertionError("not asked")


def test_rag_gain_drops_the_documents_a_prompt_has_no_room_for():
    """rag-gain sent every question with its k documents: one that fitted alone but not with
    them failed vLLM's whole batch. Its prompt now drops the lowest-ranked documents first,
    as the RAG loop does, and `doc_ids` names those it kept."""
    from retrieval_gate.labels.rag_gain import rag_gain_rows
    from retrieval_gate.questions import Question
    from retrieval_gate.retrieval.base import Document, Hit

    class Retriever:
        name = "fixed"

        def retrieve(self, questions, k=5):
            return [[Hit(Document(f"d{i}", "", "Paris " + "word " * 30), 1.0) for i in range(k)]
                    for _ in questions]  # fmt: skip

    gen = _WordsGenerator()
    short = Question(id="s", text="Capital of France?", answers=("Paris",), source="t")
    long = Question(
        id="l", text="Capital of France? " + "why " * 40, answers=("Paris",), source="t"
    )
    rows = {r["id"]: r for r in rag_gain_rows(gen, Retriever(), [short, long], {}, {}, k=5)}
    assert all(n <= 240 - 24 for n in gen.prompt_lengths(gen.prompts))
    assert 1 <= len(rows["l"]["doc_ids"]) < len(rows["s"]["doc_ids"]) <= 5
    assert rows["l"]["doc_ids"] == [f"d{i}" for i in range(len(rows["l"]["doc_ids"]))]
    # `label --k 1000000000000` asked for the whole corpus: no more than the window holds
    asked = []

    class Counting(Retriever):
        def retrieve(self, questions, k=5):
            asked.append(k)
            return super().retrieve(questions, min(k, 300))

    rag_gain_rows(gen, Counting(), [short], {}, {}, k=10**12)
    assert asked == [240]


# ---------------------------------------------------------------- --relabel: which file

RELABEL_LLM = "relabel-test-llm"  # its folder under the project's data/labels must stay absent


@pytest.fixture
def project_labels():
    """The project's own data/labels/<RELABEL_LLM>: the file --relabel rewrote whatever
    --out or --labels-dir said; removed should a run make it, so the checkout stays clean."""
    import shutil

    from retrieval_gate.labels.label_files import LABELS_DIR

    folder = LABELS_DIR / RELABEL_LLM
    assert not folder.exists(), f"{folder}: left by an earlier run; remove it"
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _write_labels(path, rows, policy="closed-book"):
    """A label file in the shape `label` writes: rows keeping their measures + provenance."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    meta = {"policy": policy, "generator": RELABEL_LLM, "criterion": "loose-no-guess"}
    path.with_name(path.name.removesuffix(".jsonl") + ".meta.json").write_text(json.dumps(meta))


def _measures(em: bool) -> dict:
    return {"match": True, "em": em, "f1": 1.0 if em else 0.5, "guess": False}


CLOSED_ROWS = [{"id": "q1", "label": 0, **_measures(False)},
               {"id": "q2", "label": 0, **_measures(True)}]  # fmt: skip
# rag-gain rows keep their own closed-book measures: no closed-book file is read
RAG_ROWS = [{"id": "q1", "label": 0, "rag_match": True, "rag_em": True, "rag_f1": 1.0,
             "closed": _measures(False)}]  # fmt: skip


@pytest.mark.parametrize(
    "policy, rows, where",
    [
        ("closed-book", CLOSED_ROWS, "labels-dir"),
        ("closed-book", CLOSED_ROWS, "out"),
        ("rag-gain", RAG_ROWS, "out"),
    ],
    ids=["closed-book-labels-dir", "closed-book-out", "rag-gain-out"],
)
def test_relabel_rewrites_the_file_out_or_labels_dir_names(
    policy, rows, where, tmp_path, capsys, project_labels
):
    """`--relabel` rewrote data/labels/<generator>/<policy>.jsonl whatever --out or
    --labels-dir named (or failed there, leaving an empty file in the checkout)."""
    import json

    from retrieval_gate.labels.label_files import LabelFile

    if where == "out":
        path, flags = tmp_path / "mine.jsonl", ["--out", str(tmp_path / "mine.jsonl")]
    else:
        path = tmp_path / "L" / RELABEL_LLM / f"{policy}.jsonl"
        flags = ["--labels-dir", str(tmp_path / "L")]
    _write_labels(path, rows, policy)
    argv = ["label", "--policy", policy, "--relabel", "--criterion", "em", *flags,
            "--generator", RELABEL_LLM]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert result["path"] == str(path) and result["labels_changed"] == 1
    relabelled = LabelFile(path)
    assert relabelled.rows["q1"]["label"] == 1  # not an exact match: needs retrieval / helps
    assert relabelled.meta["criterion"] == "em"
    assert not project_labels.exists()


@pytest.mark.parametrize(
    "made, argv, message",
    [
        (None, ["--labels-dir", "{tmp}/L"], "{tmp}/L/relabel-test-llm/closed-book.jsonl: label "
         "file not found; --relabel rewrites an existing label file: name a closed-book file"),
        (None, ["--out", "{tmp}/mine.jsonl"], "{tmp}/mine.jsonl: label file not found"),
        ("empty", ["--out", "{tmp}/mine.jsonl"], "{tmp}/mine.jsonl: label file has no "
         "provenance file mine.meta.json beside it: name a closed-book file that `label` wrote "
         "with --out FILE or --labels-dir DIR"),
        ("rag-gain", ["--out", "{tmp}/mine.jsonl"], "made by --policy rag-gain, not "
         "closed-book: pass --policy rag-gain"),
        ("closed-book", ["--out", "{tmp}/mine.jsonl", "--questions", "q.csv"], "--questions "
         "picks the questions to label, and --relabel rewrites the rows already in the label "
         "file"),
    ],
    ids=["no-file-in-labels-dir", "no-out-file", "no-provenance", "other-policy", "questions"],
)  # fmt: skip
def test_relabel_refuses_a_file_it_cannot_relabel_and_creates_none(
    made, argv, message, tmp_path, capsys, project_labels
):
    """Refused with the path and the fix (exit 2), before any file is made or changed."""
    mine = tmp_path / "mine.jsonl"
    if made == "empty":
        mine.touch()
    elif made:
        _write_labels(mine, RAG_ROWS if made == "rag-gain" else CLOSED_ROWS, made)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert main(["label", "--policy", "closed-book", "--relabel", "--criterion", "em", *argv,
                 "--generator", RELABEL_LLM]) == 2  # fmt: skip
    assert message.format(tmp=tmp_path) in capsys.readouterr().err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "L").exists() and not project_labels.exists()
