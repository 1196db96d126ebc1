"""The demo's orchestration: stage reuse, the report and the printed headline."""

import json
from pathlib import Path

import pytest

from retrieval_gate.demo import STAGES, first_table, headline, run_demo, upstream, write_report
from retrieval_gate.errors import ConfigError


def test_first_table():
    md = "# T\n\ntext\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n| c |\n|---|\n"
    assert first_table(md) == "| a | b |\n|---|---|\n| 1 | 2 |"
    assert first_table("no table") == ""


def test_unknown_stage_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown stage 'nope'.*train"):
        run_demo(tmp_path, only="nope")


def test_the_stage_flag_lists_every_stage(capsys):
    """`demo --help` listed the stages by hand, without router-tune."""
    from retrieval_gate.cli import build_parser
    from retrieval_gate.demo import STAGES

    with pytest.raises(SystemExit):
        build_parser(["demo"]).parse_args(["demo", "--help"])
    shown = " ".join(capsys.readouterr().out.split()).replace("- ", "-")
    assert ", ".join(s.name for s in STAGES) in shown, shown


@pytest.mark.parametrize("value", ["off", "maybe", "false"])
def test_a_preload_setting_other_than_0_or_1_stops_the_demo_first(tmp_path, monkeypatch, value):
    """Only 0 turned forking off: `off` or `false` silently forked every stage."""
    import retrieval_gate.demo as demo

    ran = []
    monkeypatch.setattr(demo, "run_stage", lambda argv, name, *a, **k: ran.append(name) or 0)
    monkeypatch.setenv("RETRIEVAL_GATE_PRELOAD", value)
    with pytest.raises(ConfigError, match=f"RETRIEVAL_GATE_PRELOAD is '{value}': set 0"):
        run_demo(tmp_path)
    assert not ran and not list(tmp_path.iterdir())  # no stage ran, no lock left


def test_what_the_stages_read_is_found_before_the_first_one(tmp_path, monkeypatch):
    """Run outside the checkout, the demo stopped at train (its fourth stage: the config is a
    path from the checkout's root); without the Adaptive-RAG release, at the router's stage 9."""
    import retrieval_gate.demo as demo
    from retrieval_gate.errors import InputError

    ran = []
    monkeypatch.setattr(demo, "run_stage", lambda argv, name, *a, **k: ran.append(name) or 0)
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"the demo's stages read configs/.* from the "
                       r"checkout's root: run it there \(`make demo`\)"):  # fmt: skip
        run_demo(out)
    monkeypatch.chdir(Path(__file__).parents[1])
    data = tmp_path / "data"  # the six datasets, no release
    data.mkdir()
    for name in ("entityquestions", "freshqa", "popqa", "retrievalqa", "toolqa", "triviaqa"):
        (data / name).symlink_to(demo._data_dir() / name)
    monkeypatch.setenv("RETRIEVAL_GATE_DATA", str(data))
    with pytest.raises(InputError, match="no Adaptive-RAG release folder here"):
        run_demo(out)
    assert not ran and not out.exists()  # no stage ran, nothing made


def _finished(out, stages=STAGES, seconds=1.5):
    """Markers as a finished demo leaves them, each keyed by its present inputs and recording
    the files it made (stand-ins, where not there)."""
    from retrieval_gate.demo import common_keys
    from retrieval_gate.stage_markers import inputs_key, output_record

    (shared, release), markers = (
        common_keys(),
        {s.name: out / f"{s.name}.done.json" for s in STAGES},
    )
    for stage in stages:
        for path in stage.outputs(out):  # the files it made (reused only while as it left them)
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                path.write_text("")
        key = release if stage.release else shared
        inputs = inputs_key(stage.argv(out), key, [markers[n] for n in upstream(stage)], out)
        done = {"argv": stage.argv(out), "seconds": seconds, "inputs": inputs,
                "outputs": output_record(stage.outputs(out), out)}  # fmt: skip
        markers[stage.name].write_text(json.dumps(done))


def test_finished_stages_are_reused_and_reported(tmp_path, capsys):
    (tmp_path / "evaluate").mkdir(exist_ok=True)
    (tmp_path / "evaluate" / "report.md").write_text(
        "# Gates\n\n| gate | auroc |\n|---|---|\n| tfidf | 0.8 |\n"
    )
    _finished(tmp_path)
    assert run_demo(tmp_path) == 0  # every stage reused: nothing runs
    out = capsys.readouterr().out
    assert out.count("(reused, 2 s)") == len(STAGES)
    assert "| tfidf | 0.8 |" in out
    report = write_report(tmp_path).read_text()
    assert "## Evaluation" in report and "### Gates" in report  # stage headings nested
    assert report.count("| 1.5 |") == len(STAGES)
    assert "tfidf" in headline(tmp_path)


def test_a_report_md_the_demo_did_not_write_is_refused_before_any_stage(tmp_path, monkeypatch):
    """`demo --out FOLDER` replaced the user's own REPORT.md there after the last stage."""
    import retrieval_gate.demo as demo
    from retrieval_gate.errors import InputError

    monkeypatch.setattr(demo, "run_stage", lambda *a, **k: pytest.fail("a stage ran"))
    report = tmp_path / "REPORT.md"
    report.write_text("# My notes\n")
    with pytest.raises(InputError, match=r"REPORT\.md: already exists, and retrieval-gate did"):
        run_demo(tmp_path)
    assert report.read_text() == "# My notes\n"
    _finished(tmp_path)  # every stage done: the report is all a run writes
    report.write_text("# retrieval-gate demo report\n\nan earlier demo's, before the ledger\n")
    assert run_demo(tmp_path) == 0 and "CPU model:" in report.read_text()  # replaced
    report.write_text(report.read_text() + "my annotation\n")  # ours, edited since
    with pytest.raises(InputError, match="or it was changed since"):
        run_demo(tmp_path)
    assert report.read_text().endswith("my annotation\n")


def _redone(out, name):
    done = out / f"{name}.done.json"
    done.write_text(done.read_text().replace('"seconds": 1.5', '"seconds": 9.0'))


def test_a_stage_whose_inputs_changed_runs_again_and_every_stage_reading_it(
    tmp_path, monkeypatch, capsys
):
    """Markers were reused by name: a demo re-run after an earlier stage was redone (or the
    code, data or a config changed) reported results built on the old ones. Only the stages
    that read a redone one run again: a redone RAG stage does not retrain the router."""
    import retrieval_gate.demo as demo

    ran = []
    monkeypatch.setattr(demo, "run_stage", lambda argv, name, *a, **k: ran.append(name) or 0)
    _finished(tmp_path)
    assert run_demo(tmp_path) == 0 and ran == []
    _redone(tmp_path, "train")
    assert run_demo(tmp_path) == 0
    assert ran == ["tune", "export", "evaluate", "rag"]
    assert "note: stage tune ran on other inputs" in capsys.readouterr().out
    ran.clear()
    assert run_demo(tmp_path) == 0 and ran == []  # their new markers match
    _redone(tmp_path, "rag")  # `demo --stage rag`: nothing reads its results
    assert run_demo(tmp_path) == 0 and ran == []
    _redone(tmp_path, "models")
    assert run_demo(tmp_path) == 0 and ran == [s.name for s in STAGES[2:]]
    ran.clear()
    capsys.readouterr()
    (tmp_path / f"{STAGES[-1].name}.done.json").write_text('{"argv": ["lab')  # cut short
    assert run_demo(tmp_path) == 0 and ran == [STAGES[-1].name]
    assert f"note: stage {STAGES[-1].name}'s marker " in capsys.readouterr().out  # and said


def test_a_stage_reads_only_stages_before_it():
    names = [s.name for s in STAGES]
    for i, stage in enumerate(STAGES):
        assert set(stage.reads) <= set(names[:i]), stage.name
    assert upstream(STAGES[names.index("rag")]) == ["models", "train", "tune", "export"]


def test_inputs_are_the_files_a_stage_names_and_those_its_yaml_names(tmp_path):
    from retrieval_gate.stage_markers import inputs_key

    labels, config, out = tmp_path / "l.jsonl", tmp_path / "c.yaml", tmp_path / "runs"
    labels.write_text('{"id": "a", "label": 1}\n')
    config.write_text(f"data:\n  label_file: {labels}\n")
    (out / "tune").mkdir(parents=True)
    (out / "tune" / "studies.db").write_text("v1")
    argv = ["train", "--config", str(config), "--storage", str(out / "tune" / "studies.db")]
    key = inputs_key(argv, "code", [], out)
    (out / "tune" / "studies.db").write_text("v2")  # the stage's own output: not an input
    assert inputs_key(argv, "code", [], out) == key
    labels.write_text('{"id": "a", "label": 0}\n')  # named by the config only
    assert inputs_key(argv, "code", [], out) != key
    key = inputs_key(argv, "code", [], out)
    assert inputs_key(argv, "new code", [], out) != key
    assert inputs_key([*argv, "--limit", "5"], "code", [], out) != key


def test_over_budget_note_reads_the_last_progress_bar():
    import io

    from tqdm import tqdm

    from retrieval_gate.demo import over_budget_note

    err = io.StringIO()
    bar = tqdm(total=600, desc="Processed prompts", file=err, mininterval=0)
    bar.update(270)
    bar.close()
    note = over_budget_note("evaluate", 240, 300, "vLLM log line\n" + err.getvalue())
    assert "past its 240 s budget (300 s so far)" in note
    assert "Processed prompts 270/600" in note
    assert "left by its bar" in note
    lightning = (
        "Loading weights: 100%|##########| 103/103 [00:00<00:00, 17160.41it/s]\n"
        "Epoch 0:   8%|8         | 10/125 [04:42<54:11,  0.04it/s]"
    )
    assert "Epoch 0 10/125, about 54:11 left" in over_budget_note("train", 240, 300, lightning)
    quiet = over_budget_note("train", 240, 250, "Loading weights\nEpoch 1 starting\n")
    assert "no progress bar yet, last output: Epoch 1 starting" in quiet


def test_interrupted_stage_is_not_marked_done_and_no_report(tmp_path, monkeypatch, capsys):
    import retrieval_gate.demo as demo

    first = STAGES[0]
    _finished(tmp_path, STAGES[:1])

    def interrupted(argv, name, budget, work_file, fork):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run_stage", interrupted)
    assert run_demo(tmp_path) == 130
    assert "interrupted in stage " + STAGES[1].name in capsys.readouterr().err
    assert (tmp_path / f"{first.name}.done.json").exists()  # finished stage kept
    assert not (tmp_path / f"{STAGES[1].name}.done.json").exists()  # resumed next run
    assert not (tmp_path / "REPORT.md").exists() and not list(tmp_path.glob("*.tmp"))


def test_stage_times_and_budgets_in_report(tmp_path):
    from retrieval_gate.demo import stage_times

    for stage in STAGES[:2]:
        (tmp_path / f"{stage.name}.done.json").write_text(json.dumps({"argv": [], "seconds": 2.0}))
    report = write_report(tmp_path).read_text()
    assert f"| total |  | 4.0 | {sum(s.budget for s in STAGES):.0f} |" in report
    assert sum(s.budget for s in STAGES) <= 15 * 60
    assert (
        stage_times(tmp_path)
        == f"stage times: {STAGES[0].name} 2 s, {STAGES[1].name} 2 s; total 4 s"
    )
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.slow  # a subprocess
def test_stop_passes_ctrl_c_on_to_a_stage_that_did_not_get_it():
    import subprocess
    import sys

    from retrieval_gate.demo import stop

    # the handler is set explicitly: a shell running the suite in the background makes its
    # children ignore SIGINT, and Python then installs no KeyboardInterrupt handler
    code = (
        "import signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "print('ready', flush=True)\n"
        "try:\n    time.sleep(600)\nexcept KeyboardInterrupt:\n    raise SystemExit(7)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"  # its handler is set
    stop(proc, grace=0.5)  # the child never saw a Ctrl-C: stop sends it one
    assert proc.returncode == 7


def test_the_router_saving_table_leads_the_report_and_the_headline(tmp_path):
    from retrieval_gate.demo import SAVING

    (tmp_path / "router").mkdir()
    (tmp_path / "router" / "report.md").write_text(
        "# Gates\n\n| gate | auroc |\n|---|---|\n| onnx | 0.7 |\n\n"
        f"{SAVING}\n\n| policy | accuracy |\n|---|---|\n| always multi_step | 0.36 |\n"
    )
    report = write_report(tmp_path).read_text()
    saving = report.index("## The saving")
    assert saving < report.index("| always multi_step | 0.36 |") < report.index("## Router on")
    head = headline(tmp_path)
    assert head.startswith("## The saving") and "| onnx | 0.7 |" not in head
    names = ["router-train", "router-tune", "router-export", "router-evaluate"]
    assert [s.name for s in STAGES][-4:] == names
    train, tune = (STAGES[-4].argv(tmp_path), STAGES[-3].argv(tmp_path))
    assert "configs/experiments/router-adaptive-rag-llama8b.yaml" in train and "--resume" in train
    assert tune[tune.index("--learned-run") + 1] == str(tmp_path / "checkpoints" / "router-llama8b")
    (tmp_path / "router-tune").mkdir()
    (tmp_path / "router-tune" / "tune-router-learned-adaptive-rag.md").write_text(
        "# Router tuning\n\n| objective | price |\n|---|---|\n| budget-accuracy@1 | 0.03 |\n"
    )
    report = write_report(tmp_path).read_text()
    assert "| budget-accuracy@1 | 0.03 |" in report and "budget-accuracy@1" not in headline(
        tmp_path
    )


def test_report_names_the_cpu_and_each_stages_work(tmp_path):
    counts = {"prefill_tokens_computed": 36660, "decode_tokens_computed": 1200,
              "llm_calls_cached": 540, "train_examples": 8000, "train_tokens": 120000}  # fmt: skip
    rag = next(s for s in STAGES if s.name == "rag")
    done = {"argv": [], "seconds": 3.0, "work": counts}
    (tmp_path / f"{rag.name}.done.json").write_text(json.dumps(done))
    report = write_report(tmp_path).read_text()
    assert "CPU model: " in report and ("AVX" in report or "unknown CPU" in report)
    header = next(line for line in report.splitlines() if line.startswith("| stage |"))
    for column in ("wall time (s)", "prefill tokens", "decode tokens", "training examples"):
        assert column in header
    row = next(line for line in report.splitlines() if line.startswith(f"| {rag.title} |"))
    assert "| 36660 | 1200 | 540 | 8000 | 120000 |" in row


@pytest.mark.slow  # a subprocess
def test_a_stage_writes_its_work_counters_for_the_report(tmp_path):
    from retrieval_gate.demo import _read_work, run_stage

    work_file = tmp_path / "data.work.json"
    assert run_stage(["data", "summary"], "data", 60, work_file) == 0
    counts = _read_work(work_file)
    assert set(counts) >= {"prefill_tokens_computed", "train_examples"}
    assert all(v == 0 for v in counts.values())  # a summary generates and trains nothing
    assert _read_work(tmp_path / "missing.json") == {}


def test_the_demo_fits_the_stacked_gate(tmp_path):
    """Issue 38: the demo's gate is the stacked head on frozen MiniLM (no epochs: a killed stage
    re-fits, and an earlier demo's fine-tuned run is replaced); the full fine-tune stays a config."""
    from retrieval_gate.demo import GATE_CONFIG
    from retrieval_gate.training.config import load_config

    train = next(s for s in STAGES if s.name == "train").argv(tmp_path)
    assert (
        GATE_CONFIG in train and "--overwrite" in train and "run.name=minilm-closed-book" in train
    )
    cfg = load_config(GATE_CONFIG)
    assert cfg.model.head == "stacked" and cfg.data.task == "binary" and not cfg.model.source_model
    assert load_config("minilm-closed-book").model.head == "linear"  # for a GPU
    # issue 37: the two-stage gate; rag's cascade mode reads its answers with the same export
    assert cfg.model.answer_confidence
    rag = next(s for s in STAGES if s.name == "rag").argv(tmp_path)
    export = rag[rag.index("--onnx") + 1]
    assert "cascade" in rag and rag[rag.index("--answer-gate") + 1] == export
    assert rag[rag.index("--router") + 1] == export


def test_the_demo_keeps_its_studies_in_a_journal_file(tmp_path):
    """The tune stage's Pareto study (100 trials, one process) in Optuna's journal file: in
    SQLite each trial cost ~64 ms of SQLAlchemy on the 2-core Zen 3, ~10 s of the stage."""
    import optuna

    from retrieval_gate.tuning.storage import open_storage

    tune = next(s for s in STAGES if s.name == "tune").argv(tmp_path)
    (tmp_path / "tune").mkdir()
    storage = open_storage(tune[tune.index("--storage") + 1])
    assert isinstance(storage, optuna.storages.JournalStorage)


FORKED = """
import json, os, signal, subprocess, sys, time
from pathlib import Path
from retrieval_gate import demo, preload, work
preload.MODULES = ("json",)  # the mechanism, without torch's and vLLM's import time
demo.subprocess.Popen = None  # a stage that fell back to a fresh interpreter would fail
work.WORK.train_examples = 5  # the parent's counts must not reach a stage's file
work_file = Path(sys.argv[1])
ok = demo.run_stage(["data", "summary"], "data", 60, work_file, fork=True)
bad = demo.run_stage(["demo", "--stage", "nope"], "bad", 60, None, fork=True)

def sleeper(argv):
    print("ready", flush=True)  # its SIGINT handler is set
    try:
        time.sleep(600)
    except KeyboardInterrupt:
        return 7
    return 0

stage = preload.ForkedStage(["x"], dict(os.environ), main=sleeper)
try:
    stage.wait(timeout=0.3)
    waited = "returned"
except subprocess.TimeoutExpired:
    waited = "timed out"
assert stage.stdout.readline() == b"ready\\n"
stage.send_signal(signal.SIGINT)
interrupted = stage.wait(timeout=30)
stage = preload.ForkedStage(["x"], dict(os.environ), main=sleeper)
stage.terminate()
terminated = stage.wait(timeout=30)
# the stage's collections skip the heap it inherited (frozen before the fork)
import gc
frozen = preload.ForkedStage(["x"], dict(os.environ), main=lambda argv: gc.get_freeze_count() == 0)
print(json.dumps({"forked": preload.available(), "ok": ok, "bad": bad, "waited": waited,
                  "interrupted": interrupted, "terminated": terminated,
                  "frozen": frozen.wait(timeout=30)}))
"""


@pytest.mark.slow  # a subprocess that imports torch
def test_a_forked_stage_is_its_own_process_with_its_output_exit_code_and_counters(tmp_path):
    """The demo forks its stages from one process that imported the heavy libraries once:
    each is still the verb with its own output, exit code, counters and signals."""
    import os
    import subprocess
    import sys

    work_file = tmp_path / "data.work.json"
    env = {**os.environ, "RETRIEVAL_GATE_PRELOAD": "1"}
    run = subprocess.run([sys.executable, "-c", FORKED, str(work_file)], env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    *output, last = run.stdout.strip().splitlines()
    assert json.loads(last) == {"forked": True, "ok": 0, "bad": 2, "waited": "timed out",
                                "interrupted": 7, "terminated": -15, "frozen": 0}  # fmt: skip
    text = "\n".join(output)
    assert "data folder:" in text  # the stage's own output, through the pipe
    assert "unknown stage 'nope'" in text
    counts = json.loads(work_file.read_text())
    assert counts["train_examples"] == 0 and set(counts) >= {"prefill_tokens_computed"}


@pytest.mark.slow  # a subprocess
def test_preload_off_runs_each_stage_in_a_fresh_interpreter():
    import os
    import subprocess
    import sys

    code = "from retrieval_gate import preload; print(preload.available())"
    env = {**os.environ, "RETRIEVAL_GATE_PRELOAD": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_a_second_demo_in_the_same_folder_is_refused_at_once(tmp_path, monkeypatch):
    """Two `make demo`s in one folder trained into the same run folder at once (the demo
    passes --overwrite); the second now stops before any stage, naming the first's pid."""
    import os

    import retrieval_gate.demo as demo
    from retrieval_gate.errors import InputError
    from retrieval_gate.labels.lock import single_writer

    monkeypatch.setattr(demo, "run_stage", lambda *a, **k: pytest.fail("a stage ran"))
    with single_writer(tmp_path / "demo"):  # the first demo, running
        with pytest.raises(InputError, match=f"another demo \\(pid {os.getpid()}\\) is running in"
                           ) as refused:  # fmt: skip
            run_demo(tmp_path)
    assert str(refused.value).startswith(f"{tmp_path}: ")  # it said <out>/demo, no such path
    assert not list(tmp_path.glob("*.done.json"))


def _fake_stages(monkeypatch):
    import retrieval_gate.demo as demo

    ran = []
    monkeypatch.setattr(demo, "run_stage", lambda argv, name, *a, **k: ran.append(name) or 0)
    return ran


@pytest.mark.parametrize(
    "field, value",
    [("work", ["x"]), ("work", {"train_examples": "12"}), ("argv", [1]), ("seconds", True),
     ("seconds", "2"), ("inputs", 5)],
)  # fmt: skip
def test_a_marker_whose_fields_are_of_other_types_is_damaged_and_its_stage_runs_again(
    tmp_path, monkeypatch, capsys, field, value
):
    """An edited field (work ["x"] or {"train_examples": "12"}) passed as a marker: the stage
    was reused, then the report crashed (AttributeError, TypeError) on every later run."""
    from retrieval_gate.stage_markers import read_marker

    ran = _fake_stages(monkeypatch)
    _finished(tmp_path)
    done = tmp_path / "router-evaluate.done.json"
    done.write_text(json.dumps({**json.loads(done.read_text()), field: value}))
    assert read_marker(done) is None
    assert run_demo(tmp_path) == 0 and ran == ["router-evaluate"]
    assert "note: stage router-evaluate's marker " in capsys.readouterr().out
    assert read_marker(done) is not None  # written anew: the next run reuses it


def test_a_folder_in_place_of_a_marker_is_refused_by_name_before_any_stage(tmp_path, monkeypatch):
    """A folder at a marker's path was an IsADirectoryError (exit 1) from its unlink."""
    from retrieval_gate.errors import InputError

    ran = _fake_stages(monkeypatch)
    _finished(tmp_path)
    for name in ("router-evaluate.done.json", "rag.work.json"):
        (tmp_path / name).unlink(missing_ok=True)
        (tmp_path / name).mkdir()
        with pytest.raises(InputError, match=f"{name}: a folder where the demo keeps .*move it"):
            run_demo(tmp_path)
        (tmp_path / name).rmdir()
    assert ran == []


def test_a_folder_in_place_of_a_stage_report_is_refused_by_name(tmp_path, monkeypatch):
    """A folder at evaluate/report.md was an IsADirectoryError (exit 1) from the report."""
    from retrieval_gate.errors import InputError

    ran = _fake_stages(monkeypatch)
    _finished(tmp_path)
    report = tmp_path / "evaluate" / "report.md"
    report.unlink()
    report.mkdir()
    with pytest.raises(InputError, match="report.md: a folder where the demo keeps stage evalu"):
        run_demo(tmp_path)
    assert ran == []
    for writer in (write_report, headline):
        with pytest.raises(InputError, match="report.md: a folder where the demo keeps"):
            writer(tmp_path)


def test_a_stage_whose_outputs_are_gone_or_edited_runs_again(tmp_path, monkeypatch, capsys):
    """Every stage was reused by its marker alone: with the gate's run and exports removed,
    a section's folder replaced by a file or a stage's report edited, the demo still said
    "reused" and printed a report of what was not there."""
    import shutil

    from retrieval_gate.outputs import write_owned

    ran = _fake_stages(monkeypatch)
    _finished(tmp_path)
    shutil.rmtree(tmp_path / "export")
    shutil.rmtree(tmp_path / "checkpoints" / "minilm-closed-book")
    assert run_demo(tmp_path) == 0
    both = ["train", "tune", "export", "evaluate", "rag", "router-export", "router-evaluate"]
    assert ran == both  # the two exports and the gate's run gone, and the stages reading them
    out = capsys.readouterr().out
    assert "note: stage train: its output " in out and "is missing: running it again" in out
    _finished(tmp_path)  # as a demo leaves them again
    ran.clear()
    assert run_demo(tmp_path) == 0 and ran == []
    shutil.rmtree(tmp_path / "tune")
    (tmp_path / "tune").write_text("not a folder")
    assert run_demo(tmp_path) == 0 and ran[:2] == ["tune", "export"] and "train" not in ran
    (tmp_path / "tune").unlink()
    (tmp_path / "evaluate" / "report.md").unlink(missing_ok=True)
    write_owned(tmp_path / "evaluate" / "report.md", "# Gates\n\n| gate |\n|---|\n| tfidf |\n")
    _finished(tmp_path)  # the stage's report, recorded in its marker
    ran.clear()
    assert run_demo(tmp_path) == 0 and ran == []  # the marker's record matches
    (tmp_path / "evaluate" / "report.md").write_text("# Gates\n\n| gate |\n|---|\n| mine |\n")
    capsys.readouterr()
    assert run_demo(tmp_path) == 0 and ran == ["evaluate"]
    out = capsys.readouterr().out
    assert "note: stage evaluate: its output " in out and "was changed since it wrote it" in out


@pytest.mark.parametrize("how", [{"force": True}, {"only": "labels"}])
def test_a_forced_or_requested_labels_stage_labels_its_sample_anew(tmp_path, monkeypatch, how):
    """--force and --stage labels passed the label verb the same --out, which it resumes:
    an edited row of the sample survived them."""
    import retrieval_gate.demo as demo

    _finished(tmp_path)
    sample = tmp_path / "labels-sample" / "closed-book.jsonl"
    sample.write_text('{"id": "q1", "label": 1, "edited": true}\n')
    sample.with_name("closed-book.meta.json").write_text("{}\n")
    seen = {}

    def stage(argv, name, *a, **k):
        seen[name] = sample.exists() or sample.with_name("closed-book.meta.json").exists()
        return 0

    monkeypatch.setattr(demo, "run_stage", stage)
    assert run_demo(tmp_path, **how) == 0
    assert seen["labels"] is False  # removed before the verb ran: it labels the sample anew
