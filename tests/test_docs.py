"""The docs are checked by the suite (markers and rules: tests/docs_blocks.py).

- every `retrieval-gate ...` command line in README.md and docs/*.md parses with the real
  argument parser (a documented flag that does not exist fails here);
- every Python block and every shell block with a command says whether it runs, and why not;
- the blocks marked runnable run, page by page in one process, in a workspace laid out like a
  checkout after `make demo`: `runs/demo/checkpoints/minilm-closed-book` and
  `runs/demo/export/minilm-gate` are the session's small MiniLM run and export
  (`minilm_gate_dirs`, shared with other tests), beside the checkout's `configs/`,
  `examples/` and a copy of `data/`. Pages run in the order README.md, docs/*.md and share the
  workspace, so a page may build on the README's steps; a block marked `output` must print
  what it shows. `build_generator("smollm2-135m-instruct")` in a block hands back the session's
  vLLM engine (built by that same function), so one engine serves the whole suite;
- every flag in `-h` appears in the docs (docs/cli.md lists the advanced ones)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import scratch
from docs_blocks import REPO, Block, blocks, doc_files, inline_commands, parse_error

PAGES = doc_files()
COMMANDS = [c for p in PAGES for b in blocks(p) for c in b.commands()]
COMMANDS += [c for p in PAGES for c in inline_commands(p)]
MARKABLE = [b for p in PAGES for b in blocks(p) if b.needs_marker]
# A page whose blocks build the generator uses the session's vLLM engine (the `vllm` mark).
# Every page runs in one workspace (`docs_workspace`, a training run and an export), so under
# `make test` all of them join the engine's worker (group "vllm"): neither the workspace nor
# the engine is built twice.
RUNNABLE_PAGES = [
    pytest.param(p, id=str(p.relative_to(REPO)),
                 marks=[pytest.mark.xdist_group("vllm"),
                        *([pytest.mark.vllm] if "build_generator(" in p.read_text() else [])])
    for p in PAGES if any(b.runs for b in blocks(p))
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_documented_command_parses(command):
    assert parse_error(command) is None, f"{command.where}: {command.text}\n{parse_error(command)}"


@pytest.mark.parametrize("block", MARKABLE, ids=[b.where for b in MARKABLE])
def test_block_says_whether_it_runs(block: Block):
    assert block.marker, (
        f"{block.where}: mark the block `<!-- test: run -->` (or `test: run, output`) or "
        "`<!-- not run: REASON -->` on the line before it (tests/docs_blocks.py)"
    )
    if not block.runs:
        assert block.reason and len(block.reason) > 10, f"{block.where}: say why it is not run"


# ----------------------------------------------------------------- the runnable blocks


@pytest.fixture(scope="module")
def docs_workspace(tmp_path_factory, request, minilm_gate_dirs) -> Iterator[Path]:
    """A checkout after `make demo`, small: the session's MiniLM run and export in the demo's
    places, the example files and configs, a copy of data/ (blocks may write labels)."""
    from retrieval_gate.data import resolve_data_dir

    # the checkout and its ../shared inside a folder of their own: a `shared/` left in the
    # worker's temporary root was found as ../shared/datasets by other modules' tests there
    with scratch(tmp_path_factory, request, "docs-workspace") as base:
        root = base / "main"
        root.mkdir()
        run, export = minilm_gate_dirs
        shutil.copytree(run, root / "runs/demo/checkpoints/minilm-closed-book", symlinks=True)
        shutil.copytree(export, root / "runs/demo/export/minilm-gate", symlinks=True)
        for name in ("configs", "examples", "scripts"):
            (root / name).symlink_to(REPO / name)
        shutil.copytree(REPO / "data", root / "data")
        shared = base / "shared"  # ../shared/datasets beside the checkout, as in the docs
        shared.mkdir()
        (shared / "datasets").symlink_to(resolve_data_dir(download=False))
        _tiny_router(root)
        yield root


def _tiny_router(root: Path) -> None:
    """checkpoints/router-adaptive-rag-llama8b, where docs/router.md's train block writes it:
    the shipped router config on the release, with a tiny body for MiniLM (seconds)."""
    from retrieval_gate.cli import main
    from retrieval_gate.data import resolve_data_dir
    from tiny_backbones import tiny_release_router_sets

    code = main(["train", "--config", "router-adaptive-rag-llama8b", "--data-dir",
                 str(resolve_data_dir(download=False)), "--set",
                 *tiny_release_router_sets(root / "tiny-body"),
                 f"run.output_dir={root / 'checkpoints'}", "run.name=router-adaptive-rag-llama8b"])  # fmt: skip
    assert code == 0


@pytest.fixture
def in_workspace(docs_workspace, monkeypatch):
    from retrieval_gate.data import resolve_data_dir

    monkeypatch.setenv("RETRIEVAL_GATE_DATA", str(resolve_data_dir(download=False)))
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps help to it
    monkeypatch.chdir(docs_workspace)
    return docs_workspace


def _session_generator(engine):
    """`build_generator` for the blocks: the session's engine for SmolLM2 (the same call
    built it), anything else as asked."""
    from retrieval_gate import generation

    real = generation.build_generator

    def build(name_or_path: str, backend: str = "auto", **kwargs):
        if name_or_path == "smollm2-135m-instruct" and backend in ("auto", "vllm"):
            return engine
        return real(name_or_path, backend, **kwargs)

    return build


# training and export commands that ran (and succeeded) in the shared workspace: a page that
# repeats one of the README's steps word for word (docs/your-data.md) builds on its result
# instead of training or exporting the same gate twice; every other command runs again
RAN: set[tuple[str, ...]] = set()
ONCE = ("train", "export")


def _run_shell(block: Block, capsys) -> None:
    from retrieval_gate.cli import main

    for command in block.commands():
        if command.argv[:1] and command.argv[0] in ONCE and tuple(command.argv) in RAN:
            continue
        capsys.readouterr()
        try:
            code = main(list(command.argv))
        except SystemExit as e:  # -h
            code = e.code or 0
        out, err = capsys.readouterr()
        assert code == 0, f"{command.where}: `{command.text}` exited {code}\n{out}\n{err}"
        RAN.add(tuple(command.argv))
        if block.checks_output:
            _same_output(command, out, err)


def _same_output(command, out: str, err: str) -> None:
    """The lines the block shows, in order, stdout's exactly (`...` stands for any lines),
    notes and errors among stderr's."""
    shown = [ln for ln in command.output if ln.strip()]
    stdout = [ln.rstrip() for ln in out.splitlines() if ln.strip()]
    stderr = [ln.rstrip() for ln in err.splitlines()]
    expected = [ln for ln in shown if not ln.startswith(("note:", "warning:", "retrieval-gate"))]
    assert _matches(expected, stdout), (
        f"{command.where}: `{command.text}` printed\n" + "\n".join(stdout)
        + "\n\nwhile the docs show\n" + "\n".join(expected)
    )  # fmt: skip
    for line in shown:
        if line.startswith(("note:", "warning:", "retrieval-gate")):
            assert line in stderr, f"{command.where}: {line!r} not in stderr:\n{err}"


def _matches(expected: list[str], actual: list[str]) -> bool:
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(_matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and _matches(expected[1:], actual[1:])


def _checkout_state() -> str | None:
    """The checkout's changed and untracked files (None outside a git checkout): a block that
    writes into the checkout instead of the workspace is a bug in the block or the code."""
    import subprocess

    done = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout if done.returncode == 0 else None


@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_runnable_blocks_run(page: Path, in_workspace, capsys, request, monkeypatch):
    from retrieval_gate import generation

    before = _checkout_state()

    if "build_generator(" in page.read_text(encoding="utf-8"):
        engine = request.getfixturevalue("vllm_generator")
        monkeypatch.setattr(generation, "build_generator", _session_generator(engine))
    namespace: dict = {"__name__": "__docs__"}
    for block in blocks(page):
        if not block.runs:
            continue
        if block.lang == "python":
            exec(compile(block.text, block.where, "exec"), namespace)  # noqa: S102
        else:
            _run_shell(block, capsys)
    assert _checkout_state() == before, f"{page.name}: a block wrote into the checkout"


# ----------------------------------------------------------------- every flag documented


def _leaf_parsers():
    from retrieval_gate.cli import VERBS, build_parser

    def leaves(parser, path):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield path, parser
            return
        for name, sub in subs[0].choices.items():
            yield from leaves(sub, [*path, name])

    for verb in VERBS:
        top = build_parser([verb])
        sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
        yield from leaves(sub.choices[verb], [verb])


def test_every_flag_is_in_the_docs():
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    missing = [
        f"{' '.join(path)} {flag}"
        for path, parser in _leaf_parsers()
        for action in parser._actions
        for flag in action.option_strings[:1]
        if flag not in ("-h",) and not _mentioned(flag, text)
    ]
    assert not missing, "flags in -h that no page mentions (add them to docs/cli.md):\n" + (
        "\n".join(missing)
    )


def _mentioned(flag: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def test_every_flag_shows_its_default():
    """-h tells the default of every flag that has one to tell (a required flag, a switch and
    -h itself have none), in argparse's text or the flag's own."""
    silent = []
    for path, parser in _leaf_parsers():
        assert "SUPPRESS" not in parser.format_help(), path
        formatter = parser._get_formatter()
        for a in parser._actions:
            if not a.option_strings or a.required or a.nargs == 0:
                continue
            text = formatter._expand_help(a) if a.help else ""
            if "default" not in text:
                silent.append(f"{' '.join(path)} {a.option_strings[0]}: {a.help!r}")
    assert not silent, "\n".join(silent)


def test_top_level_help_lists_every_verb_with_its_summary(capsys):
    from retrieval_gate.cli import VERBS, main

    with pytest.raises(SystemExit):
        main(["-h"])
    out = " ".join(capsys.readouterr().out.split())
    assert "retrieval-necessity gates" in out and "(run `" not in out and "SUPPRESS" not in out
    for verb, (_, summary) in VERBS.items():
        assert f"{verb} {summary}" in out, verb


def test_an_unknown_flag_gets_the_verbs_usage_and_a_suggestion(capsys):
    from retrieval_gate.cli import main

    with pytest.raises(SystemExit) as e:
        main(["tune", "--gate", "tfidf", "--labels", "x.jsonl", "--objectve", "macro-f1"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith("usage: retrieval-gate tune ")
    assert "unrecognized arguments: --objectve macro-f1 (did you mean --objective" in err


def test_old_spellings_keep_working():
    from retrieval_gate.cli import build_parser

    for argv, dest in ((["data", "summary", "--datasets", "popqa", "triviaqa"], "datasets"),
                       (["rag", "--dataset", "popqa", "triviaqa"], "dataset"),
                       (["rag", "--dataset", "popqa", "--dataset", "triviaqa"], "dataset"),
                       (["label", "--dataset", "popqa", "--dataset", "triviaqa"], "datasets")):  # fmt: skip
        assert getattr(build_parser(argv).parse_args(argv), dest) == ["popqa", "triviaqa"]


def test_the_counts(capsys):
    """What the docs tests cover (shown with -s; the lead's report quotes it)."""
    runs = [b for b in MARKABLE if b.runs]
    reasons = {}
    for b in MARKABLE:
        if not b.runs:
            reasons.setdefault(b.reason, []).append(b.where)
    print(f"\n{len(COMMANDS)} command lines parsed; {len(runs)} blocks run "
          f"({sum(b.checks_output for b in runs)} with their output checked); "
          f"{len(MARKABLE) - len(runs)} not run:")  # fmt: skip
    for reason, where in sorted(reasons.items()):
        print(f"  {len(where)} x {reason}: {', '.join(where)}")
    assert COMMANDS and runs


def test_data_dir_holds_for_the_command_only(tmp_path, monkeypatch, capsys):
    """`--data-dir` (on every verb that reads the bundled datasets) is handed on as
    $RETRIEVAL_GATE_DATA while the command runs, checked first, and restored after."""
    from retrieval_gate.cli import main
    from retrieval_gate.data import resolve_data_dir

    data = resolve_data_dir(download=False)
    if not (data / "freshqa").is_dir():
        pytest.skip("no local datasets")
    monkeypatch.delenv("RETRIEVAL_GATE_DATA", raising=False)
    monkeypatch.chdir(tmp_path)  # no ../shared/datasets from here
    assert main(["data", "summary", "--data-dir", str(data), "--dataset", "freshqa"]) == 0
    assert f"data folder: {data}" in capsys.readouterr().out
    assert "RETRIEVAL_GATE_DATA" not in os.environ
    assert main(["train", "--config", "minilm", "--data-dir", str(tmp_path / "nowhere")]) == 2
    assert "--data-dir" in capsys.readouterr().err
