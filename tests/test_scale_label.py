"""`label --engine ray` (docs/scale.md): the same label rows and provenance as a local run,
retries and fail-over against a fake OpenAI-compatible server with injected faults, a killed
driver resumed without re-sending finished questions, one writer per label file, flags and
endpoints checked before work, and the vLLM-engine processor of ray.data.llm built here."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from fake_openai_server import POLL, FakeServer, answer  # noqa: E402

from retrieval_gate.cli import main  # noqa: E402
from retrieval_gate.generation.prompts import closed_book_prompt  # noqa: E402
from retrieval_gate.generation.remote import RemoteGenerator  # noqa: E402
from retrieval_gate.labels import LabelFile, LabelRequest, label  # noqa: E402
from retrieval_gate.labels.ray_engine import RayEngine, RayOptions  # noqa: E402
from retrieval_gate.questions import Question  # noqa: E402

WORDS = ["Paris", "London", "Jupiter", "football", "1984", "Mars", "Rome", "tea"]


def questions(n: int = 24) -> list[Question]:
    """Questions of a source of their own (so judging reads no bundled dataset), each with a
    document for rag-gain's `contexts` retriever."""
    out = []
    for i in range(n):
        gold = WORDS[i % len(WORDS)]
        doc = {"title": f"doc {i}", "text": f"The answer to question {i} is {gold}."}
        out.append(Question(f"mine-{i}", f"What is thing number {i} about {WORDS[(i * 3) % 8]}?",
                            (gold,), "mine", contexts=(doc,)))  # fmt: skip
    return out


def dead_url() -> str:
    from pg_server import free_port

    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there


def rows_of(path: Path) -> dict[str, dict]:
    return LabelFile(path).rows


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(num_cpus=2, object_store_memory=200 * 1024 * 1024, include_dashboard=False,
             log_to_driver=False)  # fmt: skip
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_rows_match_a_local_run_through_faults(tmp_path, local_ray, monkeypatch):
    """Two replicas that answer 503/429 to each prompt's first attempt, a dead endpoint in the
    list, one question whose request always fails: the other questions' rag-gain rows (two
    requests per question: closed-book and with documents) equal a local run's on a clean
    server. Every server wants a key, which the actors carry from the driver's environment. The
    model reasons: each actor asks it with thinking off, as the local run does, and the label
    file records so (it recorded nothing on Ray)."""
    from retrieval_gate.generation.endpoints import API_KEY_ENV

    monkeypatch.setenv(API_KEY_ENV, "k")
    qs = questions()
    bad = Question(
        "mine-bad", "FAILME what is this?", ("x",), "mine", contexts=({"title": "t", "text": "x"},)
    )
    a, b = (FakeServer(0.01, transient=1, always_fail="FAILME", api_key="k", reasoning="parsed")
            for _ in range(2))  # fmt: skip
    with a as a_url, b as b_url, FakeServer(0.01, api_key="k", reasoning="parsed") as clean:
        engine = RayEngine(RayOptions(urls=[dead_url(), a_url, b_url], actors=2, in_flight=3,
                                      backoff=0.02, retries=5))  # fmt: skip
        local = RemoteGenerator(clean, api_key="k")
        policy = "rag-gain"  # no closed-book file yet: 2 requests a question
        for name, gen in (("ray", engine), ("local", local)):
            req = LabelRequest(policy=policy, generator=gen.name, questions=[*qs, bad],
                               labels_dir=tmp_path / name, options={"retriever": "contexts"})  # fmt: skip
            stats = label(req, generator=gen)
            # the clean server also answers the question the faulty ones always refuse
            assert stats["rows"] == len(qs) + (name == "local"), (name, policy, stats)
        ray_file = tmp_path / "ray" / "fake-llm" / f"{policy}.jsonl"
        ray_rows, local_rows = (
            rows_of(ray_file),
            rows_of(tmp_path / "local/fake-llm" / f"{policy}.jsonl"),
        )
        assert local_rows.pop("mine-bad") and ray_rows == local_rows
        assert len({r["label"] for r in ray_rows.values()}) > 1  # not all one value
        failed = [
            json.loads(x)
            for x in ray_file.with_name(f"{policy}.failed.jsonl").read_text().splitlines()
        ]
        assert [f["id"] for f in failed] == ["mine-bad"] and "500" in failed[0]["error"]
        meta = LabelFile(ray_file).meta
        local_meta = LabelFile(tmp_path / "local/fake-llm" / f"{policy}.jsonl").meta
        same = ("policy", "generator", "prompt_id", "decoding", "criterion",
                "chat_template_kwargs")  # fmt: skip
        assert {k: meta[k] for k in same} == {k: local_meta[k] for k in same}
        assert meta["engine"] == "ray" and meta["last_run"]["failed"] == 1
        assert meta["chat_template_kwargs"] == {"enable_thinking": False}
        assert meta["generator_checksum"] == f"remote:{a_url},{b_url}:fake-llm"
        assert engine.urls == [a_url, b_url] and a.served > 20 and b.served > 20  # both worked


@pytest.mark.slow
def test_killed_ray_driver_resumes_without_resending_finished_questions(tmp_path, local_ray):
    """The CLI on Ray, killed with SIGKILL mid-run (a local run on the same file meanwhile is
    refused); the re-run sends only the questions not in the file and ends with every
    question once."""
    qs = questions(30)
    qfile = tmp_path / "questions.jsonl"
    qfile.write_text(
        "".join(
            json.dumps({"id": q.id, "question": q.text, "answers": list(q.answers)}) + "\n"
            for q in qs
        )
    )
    out = tmp_path / "labels.jsonl"
    server = FakeServer(0.1)
    with server as url:
        args = ["label", "--policy", "closed-book", "--questions", str(qfile), "--out", str(out),
                "--generator-url", url]  # fmt: skip
        import ray

        # the driver joins this process's Ray (one Ray start less; --ray-address checked too)
        address = ray.get_runtime_context().gcs_address
        # one actor with two requests in flight: the 20 requests a second of two actors with
        # one each, and one Ray worker process to start per run, not two
        ray_args = [*args, "--engine", "ray", "--actors", "1", "--in-flight", "2"]
        cmd = [sys.executable, "-m", "retrieval_gate.cli", *ray_args, "--ray-address", address]
        first = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and (
                not out.is_file() or len(out.read_bytes().splitlines()) < 8
            ):
                assert first.poll() is None, first.stderr.read().decode()[-2000:]
                time.sleep(0.1)
            assert main(args) == 2  # a local run on the file the Ray run is writing: refused
            os.kill(first.pid, signal.SIGKILL)
            first.wait(30)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(first.pid, signal.SIGKILL)  # the Ray processes it started, if any remain
        before = set(rows_of(out))
        assert 8 <= len(before) < len(qs)
        sent_before = dict(server.requests)
        server.latency = 0.01  # the slow server held the first run mid-way; the re-run need not
        assert main(ray_args) == 0  # the re-run (on this process's Ray: one start less)
        sent_after = dict(server.requests)
    resent = {p for p in sent_after if sent_after[p] > sent_before.get(p, 0)}
    assert resent == {closed_book_prompt(q.text) for q in qs if q.id not in before}
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(ids) == sorted(q.id for q in qs)  # every question once: no duplicate rows


def _session_processes(sid: int) -> dict[int, str]:
    """The live processes of session `sid` (a process started with start_new_session leads
    its own), by pid: their command lines, from /proc."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[3]) == sid:
                found[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    return {pid: cmd.decode(errors="replace") for pid, cmd in found.items()}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads processes in /proc")
def test_ctrl_c_while_ray_starts_exits_130_and_leaves_no_ray_behind(tmp_path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) while `label --engine
    ray` started its local Ray: a KeyboardInterrupt inside ray.init left the Ray processes it
    had started (DashboardAgent, RuntimeEnvAgent) running a minute after the driver said
    "interrupted", and one just after ray.init made the driver's core worker died of SIGSEGV
    at exit (rc -11). The Ctrl-C is sent at three moments of the start: when its GCS, its
    raylet, and its agents appear."""
    import tempfile

    qfile = tmp_path / "questions.jsonl"
    qfile.write_text("".join(json.dumps({"id": q.id, "question": q.text,
                                         "answers": list(q.answers)}) + "\n"
                             for q in questions(4)))  # fmt: skip
    ray_tmp = tempfile.mkdtemp(prefix="rg-ray-")  # short: Ray's socket paths must fit 107 bytes
    try:
        env = {**os.environ, "RAY_TMPDIR": ray_tmp}
        with FakeServer(0.5) as url:
            for n, moment in enumerate(("gcs_server", "raylet", "ray::DashboardAgent")):
                cmd = [sys.executable, "-m", "retrieval_gate.cli", "label", "--policy",
                       "closed-book", "--questions", str(qfile), "--out",
                       str(tmp_path / f"run{n}.jsonl"), "--generator-url", url,
                       "--engine", "ray", "--actors", "1"]  # fmt: skip
                run = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, env=env)  # fmt: skip
                try:
                    deadline = time.monotonic() + 120
                    while not any(moment in c for c in _session_processes(run.pid).values()):
                        assert run.poll() is None and time.monotonic() < deadline, moment
                        time.sleep(0.02)
                    os.killpg(run.pid, signal.SIGINT)
                    err = run.communicate(timeout=60)[1].decode()
                    assert run.returncode == 130, (moment, run.returncode, err[-2000:])
                    assert "retrieval-gate label: interrupted" in err, (moment, err[-2000:])
                    deadline = time.monotonic() + 5  # Ray's processes are stopped, not orphaned
                    while (left := _session_processes(run.pid)) and time.monotonic() < deadline:
                        time.sleep(0.1)
                    assert not left, (moment, left)
                finally:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(run.pid, signal.SIGKILL)
                    for pid in _session_processes(run.pid):  # any the test found left
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.slow
def test_a_server_that_refuses_every_question_stops_a_ray_run_as_a_local_one(
    tmp_path, capsys, local_ray
):
    """A server refusing every prompt (a base model's without a chat route, say) stopped a
    local run (exit 3) while a Ray run ended 0 with an empty label file for a script to carry
    on with. Both stop, their questions listed; a re-run of only listed failures goes on."""
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    with FakeServer(0.0, refuse="?") as url:  # every question holds one
        for engine in ([], ["--engine", "ray", "--actors", "1"]):
            argv = ["label", "--policy", "closed-book", "--questions", str(qs),
                    "--generator-url", url, "--labels-dir", str(tmp_path / "l"), *engine]  # fmt: skip
            (tmp_path / "l" / "fake-llm" / "closed-book.failed.jsonl").unlink(missing_ok=True)
            assert main(argv) == 3, engine
            assert "the generator refused every" in capsys.readouterr().err
            failed = (tmp_path / "l" / "fake-llm" / "closed-book.failed.jsonl").read_text()
            assert len(failed.splitlines()) == len(QUESTIONS)
            assert main(argv) == 0  # the listed ones again: refused again, as expected


def test_engine_flags_and_endpoints_are_checked_before_work(tmp_path, capsys):
    base = ["label", "--policy", "closed-book", "--dataset", "popqa", "--limit", "2",
            "--out", str(tmp_path / "l.jsonl")]  # fmt: skip
    with FakeServer(0.0) as url, FakeServer(0.0, model="other-llm") as other:
        cases = [
            ([*base, "--engine", "ray", "--generator-url", url, "--ray-address", "127.0.0.1:1"], 3,
             "cannot reach the Ray cluster at 127.0.0.1:1"),
            # a port that is no number, or past 65535, was a traceback (urlparse's ValueError)
            *[([*base, "--engine", "ray", "--generator-url", url, "--ray-address", bad], 2,
               f"--ray-address {bad!r}: give host:port") for bad in ("host::", "host:99999", "http://host:6379")],
            ([*base, "--engine", "ray", "--generator-url", url, "--actors", "0"], 2, "--actors must be at least 1"),
            ([*base, "--engine", "ray", "--generator-url", url, "--policy", "rrcp"], 2, "--engine ray runs the one-request policies"),
            ([*base, "--engine", "ray", "--generator-url", dead_url(), dead_url()], 3, "no generator endpoint answered"),
            ([*base, "--engine", "ray", "--generator-url", url, other], 2, "the endpoints serve different models"),
            ([*base, "--engine", "ray"], 2, "--engine ray needs --generator-url"),
            ([*base, "--generator-url", url, url + "x"], 2, "several --generator-url replicas are spread by --engine ray"),
        ]  # fmt: skip
        for argv, code, message in cases:
            assert main(argv) == code, argv
            assert message in capsys.readouterr().err, argv
    assert not (tmp_path / "l.jsonl").exists()  # nothing was labelled


@pytest.mark.slow
def test_a_ray_address_where_no_ray_cluster_answers_is_refused_at_once(
    tmp_path, local_ray, monkeypatch
):
    """`--ray-address host:8265` (the dashboard's port, where 6379 was meant) hung: the port
    opened, so ray.init retried the "GCS" for ever, the label file's meta.json already
    written. Something other than a GCS there (an HTTP server, a silent one, Ray Client's
    gRPC server) is an error in seconds, before any output file; a GCS is joined."""
    import socket

    from retrieval_gate.errors import BackendError
    from retrieval_gate.labels import ray_engine
    from retrieval_gate.labels.ray_engine import check_ray_address
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    out = tmp_path / "out" / "f.jsonl"
    with FakeServer(0.0) as url:
        http = url.removeprefix("http://").removesuffix("/v1")  # an HTTP server's host:port
        argv = ["label", "--policy", "closed-book", "--questions", str(qs), "--out", str(out),
                "--generator-url", url, "--engine", "ray", "--ray-address", http]  # fmt: skip
        # a process of its own: the old code never returned (its Ray processes die with it)
        cmd = [sys.executable, "-m", "retrieval_gate.cli", *argv]
        run = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            _, err = run.communicate(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
        assert run.returncode == 3, err[-2000:]
        said = f"--ray-address {http}: something answers there, but not a Ray cluster's GCS"
        assert said in err and "does not speak gRPC" in err and "port 6379" in err, err[-2000:]
        assert not out.parent.exists()  # no meta.json, no lock: nothing written
        with pytest.raises(BackendError, match="but not a Ray Client server .it does not speak"):
            check_ray_address(f"ray://{http}")
    import ray

    gcs = ray.get_runtime_context().gcs_address
    check_ray_address(gcs)  # a GCS answers
    with pytest.raises(BackendError, match="not a Ray Client server .a gRPC server of another"):
        check_ray_address(f"ray://{gcs}")  # gRPC, but the GCS's
    # a silent server is waited for PROBE_SECONDS (5 s): 1 s here, the same deadline path
    monkeypatch.setattr(ray_engine, "PROBE_SECONDS", 1.0)
    with socket.socket() as silent:  # takes connections, says nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        where = f"127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(BackendError, match="GCS .it said nothing in 1 s"):
            check_ray_address(where)


def test_a_server_that_wants_a_key_gets_it_from_the_environment(tmp_path, capsys, monkeypatch):
    """A server started with `vllm serve --api-key` answered 401 to everything: nothing sent a
    key, and `label`, `rag` and `serve` said 'could not list models ... is --generator-url an
    OpenAI-compatible server' (the Ray engine: 'no generator endpoint answered')."""
    from retrieval_gate.generation.endpoints import API_KEY_ENV, EndpointPool
    from retrieval_gate.rag.backends import open_generator
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    with FakeServer(0.0, api_key="s3cret") as url:
        local = ["label", "--policy", "closed-book", "--questions", str(qs), "--generator-url",
                 url, "--labels-dir", str(tmp_path / "labels")]  # fmt: skip
        ray = [*local, "--engine", "ray"]
        for key, message in ((None, f"wants an API key (401): set ${API_KEY_ENV}"),
                             ("wrong", f"refused the API key in ${API_KEY_ENV} (401)"),
                             ("two words", f"${API_KEY_ENV} holds a space")):  # fmt: skip
            if key is None:
                monkeypatch.delenv(API_KEY_ENV, raising=False)
            else:
                monkeypatch.setenv(API_KEY_ENV, key)
            for argv in (local, ray, [*local, "--generator", "fake-llm"]):
                assert main(argv) == (2 if " " in (key or "") else 3), (key, argv)
                assert message in capsys.readouterr().err, (key, argv)
        failed = EndpointPool([url], "fake-llm", retries=0).chat("Who wrote Hamlet?", 8)
        assert (
            failed.error == f"the generator server at {url} wants an API key (401): set "
            f"${API_KEY_ENV} (e.g. to the key given to `vllm serve --api-key`)"
        )
        monkeypatch.setenv(API_KEY_ENV, " s3cret\n")  # as pasted: the ends are trimmed
        assert main(local) == 0
        rows = LabelFile(tmp_path / "labels/fake-llm/closed-book.jsonl").rows
        assert sorted(rows) == ["m1", "m2", "m3"]
        (answer,) = open_generator(url).generate(["Who founded Zorblat Inc?"])  # rag, serve
        assert answer.text
    assert not (tmp_path / "labels/fake-llm/closed-book.jsonl.failed.jsonl").exists()


@pytest.mark.slow
def test_vllm_engine_processor_builds_and_needs_gpus(tmp_path, local_ray):
    """The GPU path cannot run here; its ray.data.llm processor is built (so API drift shows)
    and a CPU-only Ray cluster is refused with a clear error before any work."""
    from retrieval_gate.errors import BackendError
    from retrieval_gate.generation.ray_stages import vllm_processor, vllm_request, vllm_result
    from retrieval_gate.labels.ray_engine import _start_ray
    from tiny_backbones import tiny_backbone

    folder = tiny_backbone("llama", tmp_path / "llama", ["a question", "an answer"])
    processor = vllm_processor(str(folder), actors=2, batch_size=8)
    stages = (
        [type(s).__name__ for s in processor.stages.values()]
        if isinstance(processor.stages, dict)
        else [type(s).__name__ for s in processor.stages]
    )
    assert "vLLMEngineStage" in stages, stages
    templating = [s for s in (processor.stages.values() if isinstance(processor.stages, dict)
                              else processor.stages) if type(s).__name__ == "ChatTemplateStage"]  # fmt: skip
    # a thinking model answers at once, as through chat_token_ids in-process
    assert templating[0].fn_constructor_kwargs["chat_template_kwargs"] == {"enable_thinking": False}
    request = vllm_request({"row_id": "q#0", "prompt": "Who?", "max_tokens": 24, "logprobs": True})
    assert request["sampling_params"] == {"temperature": 0.0, "max_tokens": 24, "logprobs": 0}
    result = vllm_result({"row_id": "q#0", "generated_text": "Paris", "generated_tokens": [7, 9],
                          "num_input_tokens": 12, "num_generated_tokens": 2,
                          "logprobs": [{7: {"logprob": -0.5}}, {9: {"logprob": -1.5}}]})  # fmt: skip
    assert result["token_logprobs"] == [-0.5, -1.5] and result["error"] == ""
    with pytest.raises(BackendError, match="has none; on CPUs label through `vllm serve`"):
        _start_ray(RayOptions(backend="vllm", model=str(folder)))


def test_a_rate_limit_is_waited_for_as_long_as_it_asks(monkeypatch, caplog, fresh_notes):
    """A hosted API's rate limit answers 429 with `Retry-After: 20`; the clients retried after
    their own 1, 2, 4 s (0.25-0.75 s in the Ray engine's pool), so the retries were spent
    inside the limit and the run stopped (or its rows failed). They wait what it asks for (at
    most MAX_RETRY_AFTER), in seconds or as an HTTP date; a wait of 10 s or more is said (a
    run was silent for it), once a server."""
    import email.utils

    import httpx

    from retrieval_gate.generation import endpoints, remote
    from retrieval_gate.generation.endpoints import MAX_RETRY_AFTER, EndpointPool, retry_after

    slept: list[float] = []
    for module in (endpoints, remote):
        monkeypatch.setattr(module.time, "sleep", slept.append)  # the one time module
    with FakeServer(0.0, transient=1, retry_after="7") as url:
        assert RemoteGenerator(url).generate(["Who wrote Hamlet?"])[0].text
        assert EndpointPool([url], "fake-llm").chat("Who wrote Ulysses?", 8).error is None
    assert [s for s in slept if s] == [7.0, 7.0]  # the server's own latency sleeps 0 s
    assert "asks to wait" not in caplog.text
    with FakeServer(0.0, transient=1, retry_after="30") as url:
        assert RemoteGenerator(url).generate(["Who wrote Hamlet?", "Who wrote Emma?"])[0].text
        assert EndpointPool([url], "fake-llm").chat("Who wrote Ulysses?", 8).error is None
    assert caplog.text.count(f"the generator server at {url} asks to wait 30 s before the "
                             "next attempt (Retry-After, at most 120 s is waited)") == 1  # fmt: skip
    soon = email.utils.format_datetime(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30),
                                       usegmt=True)  # fmt: skip
    waits = {v: retry_after(httpx.Response(429, headers={"Retry-After": v}))
             for v in ("2.5", soon, "1e9", "-3", "nan", "soon", "")}  # fmt: skip
    assert 25 < waits.pop(soon) <= 30
    assert waits == {"2.5": 2.5, "1e9": MAX_RETRY_AFTER, "-3": 0.0, "nan": 0.0, "soon": 0.0,
                     "": 0.0}  # fmt: skip
    assert retry_after(httpx.Response(400, headers={"Retry-After": "9"})) == 0.0


def test_a_server_that_never_answers_is_said_while_it_is_waited_for(
    monkeypatch, caplog, fresh_notes
):
    """A server that took requests and never answered kept `label` silent for the timeout
    times the attempts (20 minutes by default): the first timeout is said, once a server."""
    from retrieval_gate.errors import BackendError
    from retrieval_gate.generation import remote
    from retrieval_gate.generation.endpoints import EndpointPool

    monkeypatch.setattr(remote, "RETRY_PAUSE", 0.0)
    with FakeServer(0.5) as url:
        with pytest.raises(BackendError, match="ReadTimeout|timed out"):
            RemoteGenerator(url, timeout=0.05).generate(["Who wrote Hamlet?"])
        pool = EndpointPool([url], "fake-llm", timeout=0.05, retries=1, backoff=0.0)
        assert "cannot reach" in pool.chat("Who wrote Emma?", 8).error
    assert caplog.text.count(f"the generator server at {url} gave no answer within the "
                             "timeout (ReadTimeout): asking again") == 1  # fmt: skip


@pytest.mark.parametrize("body", [
    b"<html>Sign in to the proxy</html>",  # a proxy's login page, sent with 200
    b'{"error": {"message": "model overloaded"}}',  # an error object sent with 200
    b'{"choices": []}',
    b'{"choices": [{"message": {"content": "x"}, "logprobs": {"content": [{"logprob": "?"}]}}]}',
    # NaN and a value above 0 were stored in the label file as the answer's log-probabilities
    b'{"choices": [{"message": {"content": "x"}, "logprobs": {"content": [{"logprob": NaN}]}}]}',
    b'{"choices": [{"message": {"content": "x"}, "logprobs": {"content": [{"logprob": 0.5}]}}]}',
    b"[" * 50_000,
])  # fmt: skip
def test_a_200_reply_that_is_no_chat_completion_is_a_backend_error(body):
    """Each was a JSONDecodeError, KeyError or IndexError traceback: `label --generator-url`,
    `rag --generator-url` and the Ray engine stopped with 'internal error (a bug)'."""
    from retrieval_gate.errors import BackendError
    from retrieval_gate.generation.endpoints import EndpointPool

    with replying(body) as url:
        result = EndpointPool([url], "m").chat("Who wrote Hamlet?", 8, logprobs=True)
        assert result.error and "answered 200" in result.error and result.attempts == 1
        remote = RemoteGenerator(url, model="m")
        with pytest.raises(BackendError, match=r"answered 200 (with a|without a chat)"):
            remote.generate(["Who wrote Hamlet?"], logprobs=True)
        (failed,) = remote.try_generate(["Who wrote Hamlet?"], logprobs=True)
        assert isinstance(failed, BackendError)


def _choice(message: dict, finish: str = "stop", **more: object) -> bytes:
    return json.dumps({"choices": [{"message": message, "finish_reason": finish}], **more}).encode()


@pytest.mark.parametrize(("body", "why"), [
    (_choice({"content": None, "tool_calls": [{"id": "c"}]}, "tool_calls"), "called a tool"),
    (_choice({"content": None}), "its content is null (finish_reason 'stop')"),
    (_choice({"content": None, "refusal": "I can't help with that."}), "the model refused: "),
    (_choice({"content": ""}, "content_filter"), "content filter withheld it"),
])  # fmt: skip
def test_a_reply_without_an_answer_is_refused_not_judged_as_the_empty_answer(tmp_path, body, why):
    """A tool call, a refusal, a content filter's cut: each was judged as the empty answer, a
    question the model cannot answer (label 1), exit 0 and no failure listed, on both engines.
    The question is listed as failed, with the server's reason (a chunk refused whole stops
    the run, its questions listed all the same)."""
    from retrieval_gate.generation.endpoints import EndpointPool
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    with replying(body, models=["m"]) as url:
        result = EndpointPool([url], "m").chat("Who wrote Hamlet?", 8)
        assert f"{url} answered without an answer: " in result.error and why in result.error
        assert main(["label", "--policy", "closed-book", "--questions", str(qs),
                     "--generator-url", url, "--labels-dir", str(tmp_path)]) == 3  # fmt: skip
    failed = (tmp_path / "m" / "closed-book.failed.jsonl").read_text().splitlines()
    assert not rows_of(tmp_path / "m" / "closed-book.jsonl") and len(failed) == 3
    assert why in json.loads(failed[0])["error"]


def test_a_reply_with_counts_that_are_none_keeps_its_answer():
    """`usage` null (or a word) refused the whole answer (int(None)): a run whose server says
    so stopped at its first chunk. Counts are accounting: 0. The completions API's older
    `token_logprobs` form was refused too (KeyError 'content')."""
    old = {"tokens": ["Jane"], "token_logprobs": [-0.5]}
    body = json.loads(_choice({"content": "Jane Austen"},
                              usage={"prompt_tokens": None, "completion_tokens": "two"}))  # fmt: skip
    body["choices"][0]["logprobs"] = old
    with replying(json.dumps(body).encode()) as url:
        (got,) = RemoteGenerator(url, model="m").generate(["Who wrote Emma?"], logprobs=True)
    assert (got.text, got.prompt_tokens, got.completion_tokens) == ("Jane Austen", 0, 0)
    assert got.token_logprobs == [-0.5]


def test_a_server_without_a_chat_route_is_named_so():
    """A base model's server answers 404 on /chat/completions: the error said only that, with
    no way out."""
    from retrieval_gate.errors import PromptRefused
    from retrieval_gate.generation.endpoints import EndpointPool

    with replying(b'{"detail": "Not Found"}', status=404) as url:
        with pytest.raises(PromptRefused, match="no chat-completions route there: is it a base "):
            RemoteGenerator(url, model="m").generate(["Who wrote Hamlet?"])
        error = EndpointPool([url], "m").chat("Who wrote Hamlet?", 8).error
    assert "--chat-template FILE" in error


def test_a_model_listed_without_a_name_is_refused(tmp_path, capsys):
    """A server listing `{"id": null}` (or 7) was asked for model "None" ("7"), and its labels
    went to a folder of that name."""
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    for ids in ([None], [7]):
        with replying(_choice({"content": "x"}), models=ids) as url:
            assert main(["label", "--policy", "closed-book", "--questions", str(qs),
                         "--generator-url", url, "--labels-dir", str(tmp_path)]) == 3  # fmt: skip
        assert f"{url}/models lists no model by name (ids: {ids[0]!r})" in capsys.readouterr().err
    assert not list(tmp_path.glob("*/closed-book.jsonl"))


def test_documents_of_their_own_are_asked_of_questions_that_carry_them(tmp_path, capsys):
    """`rag-gain --retriever contexts` over a question file (whose columns give no documents)
    labelled nothing and ended 0. It is refused, naming the retrievers that read a corpus,
    before any request."""
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    server = FakeServer(0.0)
    with server as url:
        assert main(["label", "--policy", "rag-gain", "--retriever", "contexts", "--questions",
                     str(qs), "--generator-url", url, "--labels-dir", str(tmp_path)]) == 2  # fmt: skip
    assert "none of your 3 questions carries any (a question file's columns give none): " \
        "retrieve from your documents with --retriever bm25 --corpus FILE" in capsys.readouterr().err  # fmt: skip
    assert server.served == 0


@contextlib.contextmanager
def replying(body: bytes, models: list | None = None, status: int = 200):  # noqa: ANN201
    """A server whose every chat reply is `body` (with `status`), listing `models` (ids)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, data: bytes, code: int = 200) -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            listed = {"data": [{"id": m} for m in models]} if models is not None else {}
            self._send(json.dumps(listed).encode())

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._send(body, status)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(POLL,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()


def test_a_server_that_redirects_is_named_with_where_it_redirects(tmp_path, capsys):
    """http:// behind a proxy that redirects to https://: `label` said 'could not list models
    ... (Redirect response ...)', the Ray engine 'no generator endpoint answered'."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from user_files import QUESTIONS, write_jsonl

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self.send_response(301)
            self.send_header("Location", f"https://gpu-box{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=httpd.serve_forever, args=(POLL,), daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    local = ["label", "--policy", "closed-book", "--questions", str(qs), "--generator-url", url,
             "--labels-dir", str(tmp_path / "labels")]  # fmt: skip
    try:
        for argv in (local, [*local, "--engine", "ray"], [*local, "--generator", "m"]):
            assert main(argv) == 3, argv
            assert f"{url}/models answered 301, a redirect to https://gpu-box/v1/models: pass " \
                   "the URL the server is at" in capsys.readouterr().err, argv  # fmt: skip
    finally:
        httpd.shutdown()


def test_a_server_of_several_models_needs_one_named_and_a_named_one_it_serves(tmp_path, capsys):
    """A vLLM server with LoRA adapters (or a hosted API) lists several models: the first was
    taken silently. A model it does not serve failed at the first question, not before."""
    from retrieval_gate.errors import ConfigError
    from retrieval_gate.generation.endpoints import pick_model
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    with FakeServer(0.0, model="base", more_models=("base-lora",)) as url:
        local = ["label", "--policy", "closed-book", "--questions", str(qs), "--generator-url",
                 url, "--labels-dir", str(tmp_path / "labels")]  # fmt: skip
        for extra, message in (
            ([], f"{url} serves 2 models (base, base-lora): name the one to use with --generator"),
            (["--generator", "other"], f"{url} does not serve 'other'; it serves base, base-lora: "
                                       "pass one of them as --generator"),
        ):  # fmt: skip
            for argv in ([*local, *extra], [*local, *extra, "--engine", "ray"]):
                assert main(argv) == 2, argv
                assert message in capsys.readouterr().err, argv
        assert main([*local, "--generator", "base-lora"]) == 0
    with pytest.raises(ConfigError, match="at u lists no model: name the one to use with"):
        pick_model("u", [], None)
    assert sorted(rows_of(tmp_path / "labels/base-lora/closed-book.jsonl")) == ["m1", "m2", "m3"]


def test_other_weights_served_under_the_same_name_are_another_generator(tmp_path):
    """Answers cached from a server were keyed by its URL and the model's name alone: a server
    restarted on other weights under the same --served-model-name was served the old answers.
    vLLM lists the weights' path as the model's `root`; replicas that differ in it are refused."""
    from retrieval_gate.errors import ConfigError

    checksums = []
    for root in ("/models/llama-8b", "/models/qwen-7b", None):
        with FakeServer(0.0, model="llm", root=root) as url:
            checksums.append(RemoteGenerator(url).checksum.removeprefix(f"remote:{url}:"))
    assert checksums == ["llm:/models/llama-8b", "llm:/models/qwen-7b", "llm"]
    with (FakeServer(0.0, model="llm", root="/models/a") as a,
          FakeServer(0.0, model="llm", root="/models/b") as b):  # fmt: skip
        with pytest.raises(ConfigError, match=r"serve different models \(llm \(/models/a\), "
                                              r"llm \(/models/b\)\)"):  # fmt: skip
            RayEngine(RayOptions(urls=[a, b]))


def test_a_resume_on_other_weights_under_the_same_name_is_refused(tmp_path, capsys):
    """A label file from a server was resumed from any server serving the same model name: a
    server restarted on other weights under that --served-model-name appended their answers
    under the first ones' provenance. The weights it lists (`root`) are recorded and compared;
    a moved server (another URL, the same weights) resumes."""
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    out = tmp_path / "labels" / "llm" / "closed-book.jsonl"

    def label_from(root: str, *more: str) -> int:
        with FakeServer(0.0, model="llm", root=root) as url:
            return main(["label", "--policy", "closed-book", "--questions", str(qs),
                         "--generator-url", url, "--labels-dir", str(tmp_path / "labels"),
                         "--no-cache", *more])  # fmt: skip

    assert label_from("/models/a", "--limit", "1") == 0
    assert json.loads(out.with_suffix(".meta.json").read_text())["generator_root"] == "/models/a"
    before = out.read_bytes()
    capsys.readouterr()
    assert label_from("/models/b") == 2
    err = capsys.readouterr().err
    assert "serving '/models/a' under that model name; it now serves '/models/b'" in err, err
    assert out.read_bytes() == before
    assert label_from("/models/a") == 0  # the same weights on another port: resumed
    assert sorted(rows_of(out)) == ["m1", "m2", "m3"]


@pytest.fixture
def fresh_notes(monkeypatch):
    """Server warnings said anew: they are said once per URL in a process, and a port (so a
    URL) of an earlier test's server may come back."""
    from retrieval_gate.generation import endpoints

    monkeypatch.setattr(endpoints, "_NOTED", set())


@pytest.mark.parametrize("gives", [False, "never"])
def test_a_server_that_gives_no_logprobs_still_labels(tmp_path, capsys, fresh_notes, gives):
    """Closed-book labelling asks for the answer's token log-probabilities. A server that gives
    none and says so (a 400 naming `logprobs`, as several hosted OpenAI-compatible APIs answer)
    failed every request: `label --generator-url` stopped at its first chunk (exit 3) and the
    Ray engine recorded every row as failed. The request goes again without them (without the
    field: a server that takes no `logprobs` key refused `false` too), the server's refusal
    said once; the rows carry no answer confidence, and the cascade, which reads it, is refused
    before its run."""
    from retrieval_gate.errors import BackendError
    from retrieval_gate.generation.endpoints import EndpointPool
    from retrieval_gate.rag.cascade import check_logprobs
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    server = FakeServer(0.0, logprobs=gives)
    with server as url:
        assert main(["label", "--policy", "closed-book", "--questions", str(qs),
                     "--generator-url", url, "--labels-dir", str(tmp_path / "labels"),
                     "--no-cache"]) == 0  # fmt: skip
        err = capsys.readouterr().err
        refused = server.logprobs_refused  # the first requests, sent together
        assert 1 <= refused <= len(QUESTIONS), refused
        pool = EndpointPool([url], "fake-llm")
        results = [pool.chat(q["question"], 8, logprobs=True) for q in QUESTIONS]
        assert server.logprobs_refused == refused + 1  # the pool's first request only
        with pytest.raises(BackendError, match="returned no token log-probabilities, which "
                                               "the cascade reads"):  # fmt: skip
            check_logprobs(RemoteGenerator(url), "--generator-url")  # before any rag run
    assert err.count(f"the generator server at {url} gives no token log-probabilities") == 1
    rows = rows_of(tmp_path / "labels" / "fake-llm" / "closed-book.jsonl")
    assert sorted(rows) == ["m1", "m2", "m3"]
    assert all(r["mean_logprob"] is None and "token_logprobs" not in r for r in rows.values())
    assert all(r.error is None and r.text and r.token_logprobs is None for r in results)


def test_a_note_about_a_server_is_said_once_by_threads_that_meet_it_together(monkeypatch, caplog):
    """Three request threads got a reasoning reply at the same moment and two said "the model
    reasons" (the likely cause of CI's one failure of the reasoning test below, which counts
    them): the check and the mark were not one step."""
    import threading

    from retrieval_gate.generation import endpoints

    class SlowSet(set):  # widens the window between the check and the mark, as a busy CPU does
        def __contains__(self, item: object) -> bool:
            found = super().__contains__(item)
            time.sleep(0.05)
            return found

    monkeypatch.setattr(endpoints, "_NOTED", SlowSet())
    threads = [
        threading.Thread(target=endpoints.note_once, args=("u", "k", "said")) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.getMessage() for r in caplog.records] == ["said"]


def test_a_model_that_wants_max_completion_tokens_is_asked_so(tmp_path, fresh_notes):
    """OpenAI's newer models refuse `max_tokens` ("Use 'max_completion_tokens' instead"): every
    request failed, so `label --generator-url` stopped at its first chunk and no flag could
    change the field. The request goes again with the field the server names, and so do the
    later ones (here beside a server that also gives no log-probabilities)."""
    from retrieval_gate.generation.endpoints import EndpointPool
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    server = FakeServer(0.0, length_field="max_completion_tokens", logprobs=False)
    with server as url:
        assert main(["label", "--policy", "closed-book", "--questions", str(qs),
                     "--generator-url", url, "--labels-dir", str(tmp_path / "labels"),
                     "--no-cache"]) == 0  # fmt: skip
        pool = EndpointPool([url], "fake-llm")
        assert all(pool.chat(q["question"], 8, logprobs=True).text for q in QUESTIONS)
    rows = rows_of(tmp_path / "labels" / "fake-llm" / "closed-book.jsonl")
    assert sorted(rows) == ["m1", "m2", "m3"] and all(r["prediction"] for r in rows.values())
    assert set(server.requests.values()) == {1} and len(server.requests) == 6  # each once


def test_an_interrupted_run_records_how_a_reasoning_model_was_asked(tmp_path, monkeypatch):
    """The label file recorded `chat_template_kwargs` (its answers asked with thinking off)
    only when the run ended: a run stopped after its first chunk left rows asked so under a
    provenance that said nothing of it. The provenance is written again before the chunk's
    rows once the generator's has changed."""
    calls = []

    def append(self, rows):  # noqa: ANN001, ANN202
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        real_append(self, rows)

    real_append = LabelFile.append
    monkeypatch.setattr(LabelFile, "append", append)
    with FakeServer(0.0, reasoning="inline") as url:
        gen = RemoteGenerator(url)
        req = LabelRequest(policy="closed-book", generator=gen.name, questions=questions(3),
                           labels_dir=tmp_path, chunk_size=1)  # fmt: skip
        with pytest.raises(KeyboardInterrupt):
            label(req, generator=gen)
    done = LabelFile(tmp_path / "fake-llm" / "closed-book.jsonl")
    assert len(done.rows) == 1 and done.meta["chat_template_kwargs"] == {"enable_thinking": False}


def test_choices_are_scored_through_a_server_with_thinking_off(caplog, fresh_notes):
    """The in-process engine scores a prompt gate's choices through the chat template with
    thinking off (`chat.THINKING_OFF`); through a server they were asked without it, so a
    thinking model's template rendered its reasoning turn where the choice was scored (here:
    every choice alike, 0.5). They are asked with thinking off from the first request (no
    reply tells whether the model reasons); a server that refuses the field scores them
    without it, and a reasoning model's answers after that are read (said once), not asked
    again without end."""
    import numpy as np

    prompts, choices = ["Who wrote Hamlet?", "Is Paris in France?"], ["[Yes]", "[No]"]
    with FakeServer(0.0) as url:
        plain = RemoteGenerator(url).choice_probs(prompts, choices)
    assert not np.allclose(plain, 0.5)
    thinking = FakeServer(0.0, reasoning="inline")
    with thinking as url:
        np.testing.assert_allclose(RemoteGenerator(url).choice_probs(prompts, choices), plain)
    assert thinking.thinking_off == len(prompts) * (len(choices) + 1)
    with FakeServer(0.0, reasoning="inline", template_kwargs="refuse") as url:
        remote = RemoteGenerator(url)
        np.testing.assert_allclose(remote.choice_probs(prompts, choices), 0.5)
        assert "reasons" not in caplog.text  # a refused field is no reasoning
        assert [g.text for g in remote.generate(prompts)] == [answer(p) for p in prompts]
        assert remote.provenance == {} and "start its server with thinking off" in caplog.text


@pytest.mark.slow  # ten label runs
def test_a_model_that_reasons_is_asked_with_thinking_off_or_read_and_said(
    tmp_path, capsys, fresh_notes
):
    """A thinking model served without a reasoning parser put `<think>...</think>` before each
    answer, which was judged as the answer (so every question read as one it cannot answer),
    one whose block outgrew the 24 tokens left no answer at all, and a reply of content parts
    (Mistral's API: a `thinking` part, then the text) was no chat completion at all; the user
    had to restart the server with thinking off. A reply that reasons is asked again with
    `chat_template_kwargs {"enable_thinking": false}`, as the in-process engine asks, and so
    are the requests after it: the answers are the model's own. A server that refuses the field
    (OpenAI's API) or ignores it keeps its reasoning, cut off the answer (an unended block
    leaves none), and is said once, with the server flag that turns it off."""
    from retrieval_gate.generation import endpoints
    from retrieval_gate.generation.endpoints import EndpointPool
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    predictions, said, asked = {}, {}, {}
    kinds = [(None, "honour"), ("parts", "honour"), ("parts", "refuse")] + [
        (r, t) for r in ("inline", "parsed", "cut") for t in ("honour", "ignore", "refuse")]  # fmt: skip
    for reasoning, kwargs in kinds:
        endpoints._NOTED.clear()  # a later server may get an earlier one's port, so its URL
        server = FakeServer(0.0, reasoning=reasoning, template_kwargs=kwargs)
        out = tmp_path / f"{reasoning}-{kwargs}"
        with server as url:
            assert main(["label", "--policy", "closed-book", "--questions", str(qs),
                         "--generator-url", url, "--labels-dir", str(out),
                         "--no-cache"]) == 0  # fmt: skip
            before = dict(server.requests)
            prompts = sorted(before)  # the Ray engine's pool learns as the generator does
            pooled = [EndpointPool([url], "fake-llm").chat(p, 24).text for p in prompts]
            direct = [g.text for g in RemoteGenerator(url).generate(prompts)]
        rows = rows_of(out / "fake-llm" / "closed-book.jsonl")
        meta = json.loads((out / "fake-llm" / "closed-book.meta.json").read_text())
        off = meta.get("chat_template_kwargs") == {"enable_thinking": False}
        assert off == (reasoning is not None and kwargs == "honour")  # the answers' provenance
        got = predictions[reasoning, kwargs] = {i: r["prediction"] for i, r in rows.items()}
        assert pooled == direct and sorted(direct) == sorted(got.values())
        err = capsys.readouterr().err
        said[reasoning, kwargs] = (err.count(f"the model at {url} reasons before it answers: "
                                             "asking it with thinking off"),
                                   err.count("start its server with thinking off"))  # fmt: skip
        asked[reasoning, kwargs] = (set(before.values()), server.thinking_off)
    plain = predictions[None, "honour"]
    assert all(plain.values()) and len(plain) == len(QUESTIONS)
    n = len(QUESTIONS)
    for (reasoning, kwargs), got in predictions.items():
        if reasoning is None:  # a model that does not reason is asked as it always was
            assert got == plain and said[reasoning, kwargs] == (0, 0)
            assert asked[reasoning, kwargs] == ({1}, 0)
        elif kwargs == "honour":  # the model's own answers, each prompt asked at most twice
            assert got == plain and said[reasoning, kwargs] == (1, 0), (reasoning, kwargs, said)
            assert asked[reasoning, kwargs][0] <= {1, 2} and asked[reasoning, kwargs][1] >= n
        else:  # reasoning kept: cut off the answer, said once with the server's flag
            assert got == (plain if reasoning != "cut" else dict.fromkeys(plain, ""))
            assert said[reasoning, kwargs] == (1, 1), (reasoning, kwargs)


@pytest.mark.parametrize("cache", ["0", "1"])
def test_a_question_the_server_refuses_is_listed_and_the_run_goes_on(
    tmp_path, capsys, monkeypatch, cache
):
    """`label --generator-url` stopped at the chunk holding a question the server refuses for
    good (a prompt past the window of a server that counts no tokens: 400; a poison prompt: 500
    after the retries), and a re-run met it and stopped again. It is listed in
    `<file>.failed.jsonl`, as `--engine ray` lists its failures, and the others are labelled,
    each prompt asked once (the chunk is halved around it, the answers given meanwhile served
    from the generation cache, or under --no-cache held from the call that failed; the refused
    one answered with its refusal, unasked, for a minute); a server that refuses a whole chunk
    stops the run."""
    from retrieval_gate.generation import remote
    from user_files import write_jsonl

    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path / "cache"))  # the suite has none
    monkeypatch.setenv("RETRIEVAL_GATE_NO_CACHE", cache)
    monkeypatch.setattr(remote, "RETRY_PAUSE", 0.0)
    odd = {1: " FAILME", 3: " REFUSEME", 4: " GARBLED"}  # a 500 always, a 400, a 200 no reply
    rows = [{"id": f"q{i}", "question": f"Who wrote book {i}{odd.get(i, '')}?",
             "answers": ["Paris"]} for i in range(6)]  # fmt: skip
    qs = write_jsonl(tmp_path / "qs.jsonl", rows)
    out = tmp_path / "labels" / "fake-llm" / "closed-book.jsonl"
    failed = out.with_name("closed-book.failed.jsonl")
    argv = ["label", "--policy", "closed-book", "--questions", str(qs), "--chunk-size", "6",
            "--labels-dir", str(tmp_path / "labels"), "--generator-url"]  # fmt: skip
    server = FakeServer(0.0, refuse="REFUSEME", garbled="GARBLED", always_fail="FAILME")
    with server as url:
        for _ in range(2):  # the re-run asks the refused questions again, and only them
            assert main([*argv, url]) == 0
            assert sorted(rows_of(out)) == ["q0", "q2", "q5"]
            listed = [json.loads(line) for line in failed.read_text().splitlines()]
            assert [f["id"] for f in listed] == ["q1", "q3", "q4"]
            assert "answered 500" in listed[0]["error"] and "answered 400" in listed[1]["error"]
            assert "answered 200 without a chat completion" in listed[2]["error"]
            assert "3 questions failed after retries: listed in" in capsys.readouterr().err
        # each prompt asked once a run, not again at each halving that holds it (the poison
        # one with its retries: 4 attempts)
        asked = {q: server.requests.pop(closed_book_prompt(rows[i]["question"]), 0)
                 for q, i in (("poison", 1), ("garbled", 4))}  # fmt: skip
        assert asked == {"poison": 8, "garbled": 2}
        assert set(server.requests.values()) == {1} and len(server.requests) == 3
    assert (tmp_path / "cache" / "generations.sqlite").exists() == (cache == "0")
    with FakeServer(0.0, refuse="Who wrote") as url:
        out.unlink()
        assert main([*argv, url]) == 3
        assert "refused every question of a chunk of 6" in capsys.readouterr().err


@pytest.mark.parametrize("outage", ["always_fail", "garbled"])
def test_a_prompt_failed_by_an_outage_is_asked_again_once_the_server_is_back(monkeypatch, outage):
    """`serve --mode answer --generator-url`: a question asked while the server was down (a
    500 to every retry, or a 200 that is no chat completion: a proxy's page) got 503, and
    asked again once the server was back it got the outage's 503 for a minute, the server
    unasked: the refusal was remembered as the prompt's. A refusal every prompt of the batch
    got is the server's, forgotten; a 400 naming the request, or a 500 while the prompts
    batched with it were answered, is still the prompt's, answered again unasked."""
    from retrieval_gate.errors import PromptRefused
    from retrieval_gate.generation import remote

    monkeypatch.setattr(remote, "RETRY_PAUSE", 0.0)
    question, poison = "What is the capital of Peru?", "Who wrote FAILME?"
    server = FakeServer(0.0, refuse="REFUSEME")
    with server as url:
        generator = RemoteGenerator(url, "fake-llm")
        setattr(server, outage, "capital")  # the server down, for every prompt of the batch
        with pytest.raises(PromptRefused):
            generator.generate([question])
        assert isinstance(generator.try_generate([question])[0], PromptRefused)  # asked again
        down = server.requests[question]
        assert down == {"always_fail": 8, "garbled": 2}[outage]
        setattr(server, outage, None)  # back
        (got,) = generator.generate([question])
        assert got.text == answer(question) and server.requests[question] == down + 1
        for _ in range(2):  # the prompt's own refusals: asked once, then answered unasked
            with pytest.raises(PromptRefused, match="answered 400"):
                generator.generate(["Who wrote REFUSEME?"])
        assert server.refused == 1
        server.always_fail = "FAILME"  # a poison prompt, while the one batched with it is answered
        for _ in range(2):
            out = generator.try_generate([question, poison])
            assert out[0].text == answer(question) and isinstance(out[1], PromptRefused)
        assert server.requests[poison] == remote.RETRIES + 1
        generator.close()


def test_prompts_are_fitted_to_a_servers_window_as_to_the_local_engines(tmp_path):
    """A server's window was its own business: a with-retrieval prompt past a small
    `--max-model-len` got a 400 that stopped the labelling run. Where the server lists its
    window and counts tokens (vLLM's `/tokenize`), the lowest-ranked documents are dropped
    first, as in-process; a server that counts none gets the prompts whole, as before."""
    from retrieval_gate.labels.closed_book import MAX_NEW_TOKENS

    words = " ".join(f"w{i}" for i in range(40))
    qs = [Question(f"fit-{i}", f"Who is person {i}?", ("w1",), "mine",
                   contexts=tuple({"title": f"d{j}", "text": f"{words} doc {j}"} for j in range(3)))
          for i in range(4)]  # fmt: skip
    kept, longest = {}, {}
    for window in (120, None):
        server = FakeServer(0.0, window=window)
        with server as url:
            remote = RemoteGenerator(url)
            assert getattr(remote, "context_window", None) == window
            req = LabelRequest(policy="rag-gain", generator="fake-llm", questions=qs,
                               labels_dir=tmp_path / str(window),
                               options={"retriever": "contexts"})  # fmt: skip
            label(req, generator=remote)
        rows = rows_of(tmp_path / str(window) / "fake-llm" / "rag-gain.jsonl")
        kept[window] = {len(r["doc_ids"]) for r in rows.values()}
        longest[window] = max(len(prompt.split()) for prompt in server.requests)
    assert kept[None] == {3} and longest[None] > 120  # whole: past the window
    assert max(kept[120]) < 3 and longest[120] <= 120 - MAX_NEW_TOKENS  # documents dropped


def test_a_prompt_refused_in_rags_warm_up_fails_its_question_only(tmp_path, monkeypatch, capsys):
    """`rag`'s warm-up asks the first questions' prompts: one the server refuses for good there
    stopped the whole run (exit 3, no table), where later in the run it fails its question
    only. It fails its question only."""
    from retrieval_gate.generation import remote
    from user_files import QUESTIONS, write_jsonl

    monkeypatch.setattr(remote, "RETRY_PAUSE", 0.0)
    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    with FakeServer(0.0, always_fail="Hamlet") as url:  # the first question's
        assert main(["rag", "--questions", str(qs), "--split", "all", "--modes", "never",
                     "--generator-url", url, "--out", str(tmp_path / "rag.md")]) == 0  # fmt: skip
    assert "never: 1 of 3 questions got no answer" in capsys.readouterr().err
    assert (tmp_path / "rag.md").is_file()


def test_a_failed_questions_list_no_label_run_wrote_is_refused_not_emptied(
    tmp_path, capsys, monkeypatch
):
    """A label run rewrote `<file>.failed.jsonl` whenever one was there, so the user's own file
    of that name beside --out was emptied even when no question failed. One that no label run
    wrote is refused by name before any question is asked, left as it was; the run's own list
    is rewritten on the next run, and so is one an earlier release wrote beside its label file
    (no ledger entry yet: recognised by its rows)."""
    from retrieval_gate.generation import remote
    from user_files import QUESTIONS, write_jsonl

    monkeypatch.setattr(remote, "RETRY_PAUSE", 0.0)
    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    out = tmp_path / "mine.jsonl"
    failed = tmp_path / "mine.failed.jsonl"
    mine = '{"id": "x", "note": "my own notes"}\n'
    failed.write_text(mine)

    def label_with(server: FakeServer) -> tuple[int, str]:
        with server as url:
            code = main(["label", "--policy", "closed-book", "--questions", str(qs), "--out",
                         str(out), "--generator-url", url, "--no-cache"])  # fmt: skip
        return code, capsys.readouterr().err

    server = FakeServer(0.0)
    code, err = label_with(server)
    assert code == 2 and str(failed) in err and "did not write it" in err, err
    assert "pass another --out" in err and failed.read_text() == mine
    assert not out.exists() and not server.requests  # refused before the first question
    failed.unlink()
    assert label_with(FakeServer(0.0, refuse="Hamlet"))[0] == 0  # m1 fails: listed
    assert [json.loads(line)["id"] for line in failed.read_text().splitlines()] == ["m1"]
    (tmp_path / ".retrieval-gate-files.json").unlink()  # as an earlier release left it
    assert label_with(FakeServer(0.0))[0] == 0  # m1 answered now: the list is emptied
    assert failed.read_text() == "" and sorted(rows_of(out)) == ["m1", "m2", "m3"]
    failed.write_text(mine)  # the user's, beside a label file a run made: still refused
    code, err = label_with(FakeServer(0.0))
    assert code == 2 and str(failed) in err and failed.read_text() == mine, err


def test_an_out_not_ending_in_jsonl_never_takes_another_label_files_provenance(tmp_path, capsys):
    """`--out DIR/l` wrote its provenance to DIR/l.meta.json, the sidecar of DIR/l.jsonl, and
    replaced that file's record (its rows, questions, date). A label file's name must end in
    .jsonl: another is refused before anything is written, the other file's sidecar kept."""
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    first = tmp_path / "l.jsonl"

    def label_to(out: Path, *more: str) -> int:
        with FakeServer(0.0) as url:
            return main(["label", "--policy", "closed-book", "--questions", str(qs), "--out",
                         str(out), "--generator-url", url, "--no-cache", *more])  # fmt: skip

    assert label_to(first, "--limit", "1") == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    capsys.readouterr()
    assert label_to(tmp_path / "l") == 2
    err = capsys.readouterr().err
    assert "a label file's name must end in .jsonl" in err and str(tmp_path / "l") in err, err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no lock file either
