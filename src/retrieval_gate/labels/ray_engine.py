"""`label --engine ray`: the one-request label policies (closed-book, rag-gain) on Ray Data.

The policy's own functions build the prompts and judge the answers; Ray only carries the
requests. `RayEngine` stands in for the generator the policy is given, in three passes:
1. record: the policy's row function runs on each pending question with the engine
   recording the requests it asks for (no answer yet): one Ray row per (question, request),
   row id `<question id>#<n>`;
2. send: the rows go through Ray Data, to OpenAI-compatible endpoints (a pool of actors,
   `generation/ray_stages.HttpChatActor`) or vLLM engines as Ray actors (`ray.data.llm`);
3. replay: as each question's answers stream back, the row function runs again on it with
   the engine answering from what came back, and its label row is appended to the file.
So a label file written on Ray has the rows, fields and provenance a local run writes.

Resume is the label file's own: the driver is the only writer, appends a question's row once
all its requests are back (flushed at once; a half-written last line is cut by the next run),
and a re-run sends only questions not in the file. Ray Data's checkpointing is not used: it
would be a second record of what is done, which the label file already is. A killed driver
loses only the requests in flight; the questions of a request that kept failing are listed in
`<file>.failed.jsonl` and not written, so the next run retries them."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tqdm import tqdm

from ..errors import BackendError, ConfigError, PromptRefused, clipped
from ..generation.base import Generation
from ..generation.endpoints import (
    check_endpoints,
    normalise_urls,
    remote_checksum,
    server_key,
)
from ..questions import Question
from .label_files import LabelFile

log = logging.getLogger(__name__)

BACKENDS = ("openai", "vllm")
# An actor holds a thread per request in flight and a batch of rows in memory: past these a
# server's own queue (vLLM batches a few hundred sequences) or the actor's memory gives out.
MAX_IN_FLIGHT = 1024
MAX_BATCH_ROWS = 100_000
RequestKey = tuple[str, int, bool]  # prompt, max_tokens, logprobs


@dataclass
class RayOptions:
    """`label --engine ray` flags."""

    urls: list[str] = field(default_factory=list)  # OpenAI-compatible endpoints (backend openai)
    model: str | None = None  # the served model id; or the model folder (backend vllm)
    backend: str = "openai"
    address: str | None = None  # None: start a local Ray; "auto", "host:port", "ray://host:port"
    actors: int = 4
    in_flight: int = 8  # requests in flight per actor
    batch_size: int | None = None  # rows per Ray batch (default: 2 x in_flight, at least 8)
    retries: int = 4
    backoff: float = 0.5  # seconds before the first retry of a 429/5xx (doubled each time)
    object_store_mb: int = 256  # a local Ray's object store

    def check(self) -> None:
        """Flag values, before anything is contacted."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"--ray-backend must be one of {', '.join(BACKENDS)}")
        for flag, value in (("--actors", self.actors), ("--in-flight", self.in_flight)):
            if value < 1:
                raise ConfigError(f"{flag} must be at least 1, got {value}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"--ray-batch-size must be at least 1, got {self.batch_size}")
        for flag, value, most in (("--in-flight", self.in_flight, MAX_IN_FLIGHT),
                                  ("--ray-batch-size", self.batch_size, MAX_BATCH_ROWS)):  # fmt: skip
            if value is not None and value > most:  # a thread each, or rows held in memory
                raise ConfigError(f"{flag} {value}: an actor holds a thread per request in "
                                  f"flight and its batch's rows in memory; pass at most {most:,} "
                                  "(more actors spread the load)")  # fmt: skip
        if self.backend == "openai" and not self.urls:
            raise ConfigError(
                "--engine ray needs --generator-url URL [URL ...] (or --ray-backend vllm)"
            )
        if self.backend == "vllm" and self.urls:
            raise ConfigError("--ray-backend vllm runs its own engines: drop --generator-url")

    @property
    def rows_per_batch(self) -> int:
        return self.batch_size or max(8, 2 * self.in_flight)


def check_ray_address(address: str | None) -> None:
    """A clear error for a Ray address nothing listens on, or where something other than a
    Ray cluster answers (the dashboard's 8265, say): ray.init would wait a minute on the one
    and retry for ever on the other. Runs before any output file is written."""
    if address in (None, "auto", "local"):
        return
    parsed = urlparse(address if "://" in address else f"ray-gcs://{address}")
    try:
        port = parsed.port  # a port that is no number, or past 65535, raises
    except ValueError:
        port = None
    if not parsed.hostname or not port or parsed.scheme not in ("ray", "ray-gcs"):
        raise ConfigError(
            f"--ray-address {address!r}: give host:port (the head's GCS, e.g. 10.0.0.1:6379), "
            "ray://host:10001, or auto"
        )
    try:
        socket.create_connection((parsed.hostname, port), timeout=3).close()
    except OSError as e:
        raise BackendError(
            f"cannot reach the Ray cluster at {address} ({e.strerror or e}); start it with "
            "`ray start --head` (or check the address and port), or drop --ray-address to "
            "start a local Ray"
        ) from None
    _check_ray_answers(address, parsed.hostname, port, client=parsed.scheme == "ray")


# A port that answers is not yet a Ray cluster: ray.init retries a GCS that is an HTTP server
# for ever, and a Ray Client address for 30 s. The one call each makes first, with a deadline.
PROBE_SECONDS = 5.0
GCS_PROBE = "/ray.rpc.NodeInfoGcsService/GetClusterId"
CLIENT_PROBE = "/ray.rpc.RayletDriver/ClusterInfo"


def _check_ray_answers(address: str, host: str, port: int, client: bool) -> None:
    """The GCS (host:port) or Ray Client server (ray://) answers its first gRPC call."""
    import ray  # noqa: F401  (not installed: the CLI names the extra)

    try:  # Ray's own channel: TLS (RAY_USE_TLS) and token auth as ray.init sets them
        import grpc
        from ray._private.grpc_utils import init_grpc_channel
        from ray.core.generated import ray_client_pb2
    except ImportError:  # a Ray whose internals moved: ray.init is left to find out
        return
    if client:  # the ping Ray Client's proxy answers before any session
        ping = ray_client_pb2.ClusterInfoType.PING
        method, request = CLIENT_PROBE, ray_client_pb2.ClusterInfoRequest(type=ping)
    else:
        method, request = GCS_PROBE, None  # GetClusterIdRequest has no fields
    payload = request.SerializeToString() if request is not None else b""
    channel = init_grpc_channel(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    try:
        channel.unary_unary(method)(payload, timeout=PROBE_SECONDS)
        return
    except grpc.RpcError as e:  # a failed call's error is also its grpc.Call
        # "failed to connect to all addresses; last error: ...: Failed parsing HTTP/2 (...)"
        code, said = e.code(), " ".join(str(e.details() or "").split()).rsplit(": ", 1)[-1]
    finally:
        channel.close()
    # any other status (an auth token refused, say) came from the server asked: ray.init says
    if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.UNIMPLEMENTED):  # fmt: skip
        return
    what = "a Ray Client server" if client else "a Ray cluster's GCS"
    if code == grpc.StatusCode.UNIMPLEMENTED:
        why = "a gRPC server of another kind"
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        why = f"it said nothing in {PROBE_SECONDS:g} s"
    else:
        why = "it does not speak gRPC, as an HTTP server such as Ray's dashboard (8265)"
        why += f": {clipped(said, 60)}" if said else ""
    usual = (
        "Ray Client listens on the head's port 10001 (ray://host:10001; the GCS's host:6379 "
        "goes without ray://)"
        if client
        else "the GCS listens on the head's port 6379 unless `ray start --head --port` says "
        "otherwise (it prints the address to join; Ray Client's 10001 takes ray://)"
    )
    raise BackendError(
        f"--ray-address {address}: something answers there, but not {what} ({why}); "
        f"{usual}; or drop --ray-address to start a local Ray"
    )


class RayEngine:
    """A generator stand-in that brings its own labelling loop (`run_rows`, called by
    `labels.policy_loop.run_policy`). Endpoints are checked at construction, before any work."""

    def __init__(self, options: RayOptions):
        options.check()
        check_ray_address(options.address)
        self.options = options
        if options.backend == "openai":
            self.api_key = server_key()
            live, dead, model, root = check_endpoints(normalise_urls(options.urls),
                                                      options.model, self.api_key)  # fmt: skip
            for url in dead:
                log.warning("endpoint %s does not answer: its share goes to the others", url)
            self.urls, self.name = live, model
            self.checksum = remote_checksum(live, model, root)
            self.backend = "ray:openai-server"
        else:
            from ..generation.model_folders import (
                folder_checksum,
                generator_name,
                resolve_generator_model,
            )

            asked = options.model or "smollm2-135m-instruct"
            folder = Path(resolve_generator_model(asked))
            named = generator_name(asked, str(folder)) if folder.is_dir() else folder.name
            self.urls, self.name = [], named
            self.checksum = folder_checksum(folder) if folder.is_dir() else str(folder)
            self.model_source = str(folder)
            self.backend = "ray:vllm-engine"
            root = ""
        self._provenance = {"engine": "ray", "ray_actors": options.actors,
                            "ray_in_flight": options.in_flight,
                            **({"generator_root": root} if root else {})}  # fmt: skip
        self._templates: dict[str, Any] = {}  # the chat-template arguments answers were asked with
        self._recorded: list[RequestKey] | None = None
        self._answers: dict[RequestKey, Generation] = {}

    @property
    def provenance(self) -> dict[str, Any]:
        """What label files record of the engine, and how the servers were asked (each actor
        learns a reasoning model's thinking off itself: `endpoints.ServerTraits`)."""
        asked = {"chat_template_kwargs": self._templates} if self._templates else {}
        return {**self._provenance, **asked}

    # -- the Generator interface, in record or replay mode -----------------------------------
    def generate(
        self, prompts: Sequence[str], max_new_tokens: int = 24, logprobs: bool = False
    ) -> list[Generation]:
        keys = [(p, int(max_new_tokens), bool(logprobs)) for p in prompts]
        if self._recorded is not None:
            self._recorded.extend(keys)
            return [Generation("", 0, 0) for _ in keys]
        return [self._answers[k] for k in keys]

    def choice_probs(self, prompts: Sequence[str], choices: Sequence[str]):  # noqa: ANN201
        raise ConfigError(
            "--engine ray covers closed-book and rag-gain (one request per answer); "
            "choice scoring (rrcp's judge, prompt gates) runs with the local engine"
        )

    def requests_of(self, compute: Callable, question: Question) -> list[RequestKey]:
        """The requests the policy's row function asks for one question (record pass)."""
        self._recorded = []
        try:
            compute([question])
            return list(self._recorded)
        finally:
            self._recorded = None

    # -- the labelling loop ----------------------------------------------------------------
    def run_rows(
        self,
        questions: Sequence[Question],
        out: LabelFile,
        compute: Callable[[list[Question]], list[dict[str, Any]]],
        chunk_size: int,
        desc: str = "labelling",
    ) -> dict[str, Any]:
        from .policy_loop import listed_failures, pending, with_failures

        todo = pending(questions, out.done_ids())
        listed = listed_failures(out.path)  # a re-run asks them again: refused again, as expected
        plan = {q.id: self.requests_of(compute, q) for q in todo}
        rows = [
            {"row_id": f"{qid}#{i}", "prompt": k[0], "max_tokens": k[1], "logprobs": k[2]}
            for qid, keys in plan.items()
            for i, k in enumerate(keys)
        ]
        by_id = {q.id: q for q in todo}
        started = time.perf_counter()
        started_ray = False
        try:  # _start_ray shuts down what it started if it fails or is interrupted itself
            started_ray = _start_ray(self.options) if rows else False
            failed, timing = self._stream(rows, plan, by_id, out, compute, desc)
        finally:
            if started_ray:
                import ray

                with _sigint_deferred():  # a half-done shutdown is a half-started Ray again
                    ray.shutdown()
        seconds = time.perf_counter() - started
        stats: dict[str, Any] = {
            "questions": len(todo) - len(failed),
            "requests": len(rows),
            "seconds": round(seconds, 2),
            "questions_per_second": round((len(todo) - len(failed)) / seconds, 2) if todo else 0.0,
        }
        stats = with_failures(stats, out.path, failed)
        new = [f for f in failed if f["id"] not in listed]
        if len(todo) > 1 and len(failed) == len(todo) and new:  # the server's doing, as local
            raise PromptRefused(f"the generator refused every one of the {len(todo)} questions "
                                f"(e.g. {new[0]['id']}: {new[0]['error']})")  # fmt: skip
        if timing:
            stats["steady_state"] = timing
        return stats

    def _dataset(self, rows: list[dict[str, Any]]):  # noqa: ANN202
        import ray

        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False  # the driver's own bar counts questions
        opts = self.options
        batch = opts.rows_per_batch
        blocks = max(1, min(len(rows) // batch, 4 * opts.actors * 8))
        ds = ray.data.from_items(rows, override_num_blocks=blocks)
        if opts.backend == "vllm":
            from ..generation.ray_stages import vllm_processor

            return vllm_processor(self.model_source, opts.actors, batch)(ds)
        from ..generation.ray_stages import HttpChatActor

        return ds.map_batches(
            HttpChatActor,
            fn_constructor_kwargs={"urls": self.urls, "model": self.name,
                                   "in_flight": opts.in_flight, "retries": opts.retries,
                                   "backoff": opts.backoff, "api_key": self.api_key},
            compute=ray.data.ActorPoolStrategy(size=opts.actors),
            batch_size=batch,
            num_cpus=0.01,  # waiting on the network: actors do not hold a CPU each
            batch_format="numpy",
        )  # fmt: skip

    def _stream(self, rows, plan, by_id, out, compute, desc):  # noqa: ANN001, ANN202
        """Consumes results as Ray produces them; writes each question once all its
        requests are back. Returns (failed questions, steady-state timing)."""
        from ..generation.ray_stages import steady_state

        got: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
        failed: list[dict[str, Any]] = []
        actors: list[str] = []
        t_done: list[float] = []
        with tqdm(total=len(plan), desc=f"{desc} (ray)", unit="q") as bar:
            if not rows:
                return failed, None
            empty = [qid for qid, keys in plan.items() if not keys]  # nothing to ask: write now
            failed.extend(self._write_ready(empty, got, plan, by_id, out, compute))
            bar.update(len(empty))
            for batch in self._dataset(rows).iter_batches(batch_size=None, batch_format="numpy"):
                ready = []
                for i, row_id in enumerate(batch["row_id"]):
                    qid, n = str(row_id).rsplit("#", 1)
                    got[qid][int(n)] = {k: batch[k][i] for k in batch}
                    actors.append(str(batch["actor"][i]))
                    t_done.append(float(batch["t_done"][i]))
                    if len(got[qid]) == len(plan[qid]):
                        ready.append(qid)
                failed.extend(self._write_ready(ready, got, plan, by_id, out, compute))
                bar.update(len(ready))
        return failed, steady_state(actors, t_done)

    def _write_ready(self, ready, got, plan, by_id, out, compute) -> list[dict[str, Any]]:  # noqa: ANN001
        """Replays the row function on the questions whose answers are all back."""
        good, failed = [], []
        for qid in ready:
            results = got.pop(qid, {})
            errors = [r["error"] for r in results.values() if r["error"]]
            if errors:
                failed.append({"id": qid, "error": str(errors[0]),
                               "attempts": max(int(r["attempts"]) for r in results.values())})  # fmt: skip
                continue
            for n, key in enumerate(plan[qid]):
                self._answers[key] = _generation(results[n])
                self._templates.update(json.loads(str(results[n].get("template") or "{}")))
            good.append(by_id[qid])
        if good:
            out.append(compute(good))
            for q in good:  # answers are kept only until their question is written
                for key in plan[q.id]:
                    self._answers.pop(key, None)
        return failed


def _generation(result: dict[str, Any]) -> Generation:
    lps = result["token_logprobs"]
    return Generation(
        text=str(result["text"]),
        prompt_tokens=int(result["prompt_tokens"]),
        completion_tokens=int(result["completion_tokens"]),
        token_logprobs=[float(x) for x in lps] or None,
    )


def _start_ray(options: RayOptions) -> bool:
    """Connects to the cluster at `options.address`, or starts a local Ray; returns True when
    this call started it (and so must shut it down). A Ray already running in this process
    (tests, notebooks) is reused."""
    import ray

    started = not ray.is_initialized()
    try:
        if started:
            with _sigint_deferred():
                _init_ray(options)
        if options.backend == "vllm" and not ray.cluster_resources().get("GPU"):
            raise BackendError(
                "--ray-backend vllm runs vLLM engines as Ray actors on GPUs, and this Ray "
                "cluster has none; on CPUs label through `vllm serve` replicas with "
                "--generator-url"
            )
    except BaseException:  # Ctrl-C included: what ray.init started goes with this run
        if started:
            with _sigint_deferred():
                ray.shutdown()
        raise
    return started


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Holds a Ctrl-C (SIGINT) back until the block ends, then delivers it (the CLI's
    "interrupted", exit 130). A KeyboardInterrupt inside ray.init or ray.shutdown leaves Ray
    half-made: interrupted while it starts its processes, it has no record of them and
    cannot shut them down (its agents outlived the run by a minute); interrupted after it
    made the driver's core worker but before Python holds it, nothing shuts that worker down
    and its C++ exit handler tears it down under its own running IO thread: SIGSEGV at exit.
    Both calls end within seconds (a local start, ~3 s, completes even when the Ctrl-C also
    reached Ray's processes), so waiting for them is the robust choice; a second Ctrl-C
    interrupts at once, as a stuck call must stay interruptible."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is None):  # fmt: skip
        yield  # signals reach the main thread only; a handler set in C cannot be put back
        return
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        if held:  # the second: Python's own handler (KeyboardInterrupt)
            signal.default_int_handler(signum, frame)
        held.append(signum)  # no output here: a write to stderr under way would be re-entered

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:  # to the handler that was there (Python's raises KeyboardInterrupt)
            signal.raise_signal(signal.SIGINT)


def _init_ray(options: RayOptions) -> None:
    import ray

    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if options.address in (None, "local"):
        kwargs.update(num_cpus=max(2, os.cpu_count() or 2),
                      object_store_memory=options.object_store_mb * 1024 * 1024)  # fmt: skip
    else:
        kwargs["address"] = options.address
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise BackendError(f"cannot start or join Ray at {options.address or 'local'}: {e}") from e
