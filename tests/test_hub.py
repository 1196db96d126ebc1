"""Without a network (the Hub's name does not resolve), a Hub name is looked up in the Hugging
Face cache alone, so one that is not there is refused at once, saying why (`datasets` and
transformers retried the Hub for ~24 s first), and one that is there loads: vLLM, listing a
cached model's files, retried for minutes and then failed. Offline mode stays on for the rest
of the process and the engines it starts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retrieval_gate.errors import DataError, InputError

NO_HUB = r"Hub cannot be reached from here \(huggingface.co: Name or service not known\)"


@pytest.fixture
def no_dns(monkeypatch):
    import datasets
    from huggingface_hub import constants

    from retrieval_gate import hub

    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host == "huggingface.co":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.setattr(constants, "ENDPOINT", "https://huggingface.co")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_WENT_OFFLINE", {})  # put back with the flags after the test
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    start = time.monotonic()
    yield
    assert time.monotonic() - start < 10
    # on from here: for the engines this process starts, too
    assert constants.HF_HUB_OFFLINE is True and os.environ["HF_HUB_OFFLINE"] == "1"


def test_an_hf_questions_spec(no_dns):
    from retrieval_gate.data.user_questions import read_questions

    with pytest.raises(DataError, match=rf"'no-such/set'.* The {NO_HUB}: offline"):
        read_questions("hf:no-such/set@test")


def test_a_generator_or_backbone_hub_name(no_dns):
    from retrieval_gate.generation.model_folders import read_config

    with pytest.raises(InputError, match=rf"not a model transformers knows \(.*; the {NO_HUB}\)"):
        read_config("no-such/model")
    with pytest.raises(InputError, match=NO_HUB):  # the second load still says why
        read_config("no-such/other")


def test_a_gate_hub_id_not_in_the_cache(no_dns):
    from retrieval_gate import RetrievalGate

    with pytest.raises(InputError, match=rf"not in the local Hub cache.*; the {NO_HUB}"):
        RetrievalGate.from_pretrained("no-such/gate")


def cached_hub_model(hf_home: Path, repo: str, folder: Path) -> None:
    """`folder`'s files as the Hugging Face cache keeps `repo` (links: no copy)."""
    snapshot = "0" * 40
    root = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(snapshot)
    (root / "snapshots" / snapshot).mkdir(parents=True)
    for f in folder.iterdir():
        if f.is_file() and f.name != "prepared.json":
            (root / "snapshots" / snapshot / f.name).symlink_to(f.resolve())


def test_a_cached_hub_name_is_read_offline_at_once(no_dns, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from retrieval_gate.generation.model_folders import read_config

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    cached_hub_model(tmp_path / "hf", "some-org/cached", model)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    assert read_config("some-org/cached").hidden_size == 64


@pytest.mark.slow  # starts vLLM
def test_label_with_a_cached_hub_generator_and_no_network(tmp_path):
    """`label --generator owner/name` of a model the cache holds, the Hub unreachable: it took
    227 s of vLLM's retries and failed (exit 3); now it labels."""
    from retrieval_gate.generation.model_folders import prepare_smollm2

    cached_hub_model(tmp_path / "hf", "some-org/smol", prepare_smollm2())
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "Who wrote Hamlet?",
                                     "answers": ["Shakespeare"]}) + "\n")  # fmt: skip
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "https://hub.invalid"}
    env.pop("HF_HUB_OFFLINE", None)
    env["VLLM_CPU_KVCACHE_SPACE"] = "1"  # as the session's engine: 1 GiB to allocate, not 2
    cmd = [sys.executable, "-m", "retrieval_gate.cli", "label", "--policy", "closed-book",
           "--questions", str(questions), "--labels-dir", str(tmp_path / "labels"),
           "--generator", "some-org/smol", "--no-cache"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    # the Hub name resolves to the cache's snapshot folder: loaded as a folder, no Hub asked
    row = json.loads((tmp_path / "labels" / "smol" / "closed-book.jsonl").read_text())
    assert row["id"] == "q1" and row["prediction"]


def test_malformed_gate_hub_ids_are_refused_before_any_network(tmp_path, monkeypatch):
    """What the Hub's rules refuse got past a looser pattern: snapshot_download's raw
    HFValidationError (a ValueError) escaped. Now an InputError naming the id and the form,
    without asking the network."""
    import huggingface_hub
    from huggingface_hub.errors import HFValidationError

    from retrieval_gate import RetrievalGate

    def no_network(*args, **kwargs):
        raise AssertionError("asked the network")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    monkeypatch.chdir(tmp_path)  # no folder "a" here
    too_long = "owner/" + "n" * 97
    form = r"no such folder, and not a Hub id of the form owner/name, each part letters"
    for bad in ("owner/na..me", "a/..", "owner/name--x", "owner/-name", "owner/name.git",
                too_long, "owner/a b", "a/b/c"):  # fmt: skip
        with pytest.raises(InputError, match=form) as e:
            RetrievalGate.from_pretrained(bad)
        assert str(e.value).startswith(f"{bad}: no such folder")

    # another of the Hub's checks (a revision, a token) is said as clearly
    def invalid(**kwargs):
        raise HFValidationError("Invalid revision: 'a..b'.")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", invalid)
    monkeypatch.setattr("retrieval_gate.gates.pretrained.offline_when_unreachable", lambda: None)
    with pytest.raises(InputError, match=r"owner/name: .*Hub refuses: Invalid revision"):
        RetrievalGate.from_pretrained("owner/name", revision="a..b", local_files_only=True)


@pytest.fixture
def silent_hub(tmp_path, monkeypatch):
    """A Hub endpoint that takes connections and never answers (a stalled proxy or mirror),
    huggingface_hub's metadata timeout 1 s, an empty Hub cache: its URL."""
    from huggingface_hub import constants

    from retrieval_gate import hub

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # connections wait in the backlog, never accepted
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 1)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(hub, "_WENT_OFFLINE", {})
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield url
    listener.close()  # resets what waits: a load still hung (the bug) ends


def within(seconds: float, load):
    """`load()`'s result, or its error, where it ends within `seconds` (it hung for good)."""
    import threading

    done = {}

    def run():
        try:
            done["value"] = load()
        except Exception as e:  # noqa: BLE001  (handed to the test)
            done["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting on the Hub after {seconds} s"
    if "error" in done:
        raise done["error"]
    return done["value"]


def test_a_hub_that_never_answers_is_given_its_timeout(silent_hub):
    """snapshot_download's repo_info has no timeout: a Hub id hung for good (4.5 minutes and
    counting) on an endpoint that never answers. Now a BackendError naming the endpoint after
    HF_HUB_ETAG_TIMEOUT."""
    from retrieval_gate import RetrievalGate
    from retrieval_gate.errors import BackendError

    start = time.monotonic()
    said = (
        rf"owner/name: .*the Hub at {silent_hub} gave no answer within 1 s "
        r"\(HF_HUB_ETAG_TIMEOUT\), and the gate is not in the local Hub cache.*HF_HUB_OFFLINE=1"
    )
    with pytest.raises(BackendError, match=said):
        within(15, lambda: RetrievalGate.from_pretrained("owner/name"))
    assert time.monotonic() - start < 5


def test_a_cached_gate_loads_when_the_hub_never_answers(silent_hub, minilm_gate_dirs, tmp_path):
    """As huggingface_hub does where its requests time out: the cache's copy, at once."""
    from huggingface_hub import constants

    from retrieval_gate import RetrievalGate

    cached_hub_model(Path(constants.HF_HUB_CACHE).parent, "acme/gate", minilm_gate_dirs[1])
    gate = within(30, lambda: RetrievalGate.from_pretrained("acme/gate"))
    assert gate.threshold == pytest.approx(0.42)
    assert gate.predict_proba("Who wrote Hamlet?") >= 0
