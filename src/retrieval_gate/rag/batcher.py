"""Many concurrent requests, one engine: a bounded backlog and one worker thread.

A request puts its items (questions) on the backlog and awaits a future. One worker thread
takes everything waiting, up to `max_batch` items, runs ONE batched call and resolves each
request's future on that request's event loop. So the event loop never blocks (a health
check answers at once), the engine is only ever entered from one thread, and concurrent
one-question requests become one batch, which is what makes vLLM fast. A request that would
overflow the backlog, or that would wait longer than `max_wait` at the measured rate, is
refused at once (`Busy`, with a retry estimate) instead of queueing only to time out. The
rate is measured per call size: a lone question measures the engine's latency, not what a
batch of 16 gets through, so a burst is judged by calls of its own size; before one has run,
the burst is taken, and each call's measurement refuses at once the waiting requests it shows
will not be served in time (still `Busy`, never a timeout). A batch that fails is re-run
request by request, so one bad request cannot fail the others (those whose caller already
gave up are not re-run, and /health's "stuck" clock runs from the failed batch's start).

Items have a weight (`weight`, default 1): the backlog, the batch size and the measured rate
count weights, so a multi-step question counts as its steps and long questions cannot starve
the queue."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import BackendError, InputError

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger(__name__)


class Busy(Exception):
    """The backlog is full; `retry_after` is the estimated wait in whole seconds."""

    def __init__(self, backlog: int, retry_after: int):
        super().__init__(
            f"{backlog} questions are already waiting (a multi-step question counts as its "
            f"steps); retry in {retry_after} s"
        )
        self.retry_after = retry_after


class TooHeavy(InputError):
    """A request that could never fit the backlog, even empty: retrying cannot help (422)."""

    def __init__(self, size: int, heaviest: int, max_backlog: int):
        fit = max_backlog // heaviest
        steps = "" if heaviest == 1 else f" of {heaviest} steps (a multi-step question counts "
        steps += "as its steps)" if steps else ""
        super().__init__(
            f"this request weighs {size} and the backlog holds {max_backlog} (--max-backlog): "
            f"send at most {fit} questions{steps} a request"
        )


@dataclass(eq=False)  # a request is itself, whatever it holds
class _Job(Generic[T]):
    items: list[T]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    size: int = 0  # the items' total weight
    queued: float = field(default_factory=time.perf_counter)


class Batcher(Generic[T, R]):
    """Runs `fn(items) -> results` (one result per item, in order) on its own thread over
    the items of every request waiting, at most `max_batch` per call (a request larger than
    that runs alone). `max_wait`: seconds a new request may expect to wait for its results
    (backlog / rate of the recent calls) before it is refused. `weight(item)`: what an item
    counts for in the backlog, the batch and the rate (default 1)."""

    def __init__(
        self,
        fn: Callable[[list[T]], Sequence[R]],
        max_batch: int,
        max_backlog: int,
        max_wait: float | None = None,
        name: str = "batcher",
        weight: Callable[[T], int] | None = None,
    ):
        self.fn, self.max_batch, self.max_backlog = fn, max_batch, max_backlog
        self.max_wait = max_wait
        self.weight = weight or (lambda _: 1)
        self.backlog = 0  # weight of the items waiting, not yet taken by the worker
        self.running = 0  # weight of the items in the call under way
        self.call_started: float | None = None  # perf_counter at the call under way's start
        # call size -> weight per second of the latest call of that size (the latest: a call
        # served from the generation cache must not vouch for the next one computed)
        self.rates: dict[int, float] = {}
        self._jobs: deque[_Job[T]] = deque()
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    async def submit(self, items: list[T]) -> tuple[list[R], float]:
        """The results for `items` and the seconds they waited before their call started.
        Raises `Busy` when they do not fit the backlog now, `TooHeavy` when they never can.
        Cancelling the caller (a timeout, a client gone) withdraws a request that has not
        started."""
        loop = asyncio.get_running_loop()
        weights = [self.weight(x) for x in items]
        size = sum(weights)
        if size > self.max_backlog:  # a 429 "retry in 1 s" here was a promise never kept
            raise TooHeavy(size, max(weights), self.max_backlog)
        with self._wake:
            if not self._admits(size):
                raise Busy(self.backlog, self.retry_after())
            job = _Job(list(items), loop.create_future(), loop, size)
            self._jobs.append(job)
            self.backlog += size
            self._wake.notify()
        job.future.add_done_callback(lambda f: self._withdraw(job) if f.cancelled() else None)
        return await job.future

    def rate(self, waiting: int) -> float | None:
        """Weight per second while `waiting` is served: measured on calls of the size it will
        be served in (or down to half that size: batching only adds throughput, so the
        estimate errs toward a longer wait); None before such a call has run."""
        size = min(waiting, self.max_batch)
        known = [s for s in self.rates if size / 2 <= s <= size]
        return self.rates[max(known)] if known else None

    def _admits(self, n: int) -> bool:
        if self.backlog + n > self.max_backlog:
            return False
        waiting = self.backlog + self.running + n
        rate = self.rate(waiting)
        if self.max_wait is None or not rate or not self.backlog + self.running:
            return True  # an idle worker, or calls of this size not yet measured: measure
        return waiting / rate <= self.max_wait

    def _withdraw(self, job: _Job[T]) -> None:
        """A request that gave up before its call started leaves the backlog at once."""
        with self._wake:
            if job in self._jobs:
                self._jobs.remove(job)
                self.backlog -= job.size

    def retry_after(self) -> int:
        """Seconds until the waiting and running items are likely done, at the measured rate."""
        waiting = self.backlog + self.running
        rate = self.rate(waiting) or self._guessed_rate(waiting)
        if not rate:
            return 1
        return min(300, max(1, math.ceil(waiting / rate)))

    def _guessed_rate(self, waiting: int) -> float | None:
        """The rate for calls of a size not measured yet, as admission takes them (a burst is
        taken, not priced by a lone call): a call larger than the nearest size measured is
        taken to last as long as that call (batching adds throughput), a smaller one to go at
        its rate. The fastest rate measured (the warm-up's lone question) priced a cold
        server's backlog of 12 at 61 s where calls of 4 took 16 s."""
        if not self.rates:
            return None
        size = min(waiting, self.max_batch)
        near = min(self.rates, key=lambda s: (abs(s - size), -s))
        return self.rates[near] * max(1.0, size / near)

    def _refuse_late(self) -> None:
        """After a call: the waiting requests that this measurement says will not be served
        within `max_wait` of their arrival are refused now (`Busy`), not left to time out."""
        rate = self.rate(self.backlog)
        if self.max_wait is None or not rate:
            return
        now, ahead = time.perf_counter(), 0
        for job in list(self._jobs):
            ahead += job.size
            if now - job.queued + ahead / rate > self.max_wait:
                self._jobs.remove(job)
                self.backlog -= job.size
                ahead -= job.size
                _deliver(job, exception=Busy(self.backlog, self.retry_after()))

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()

    def _take(self) -> list[_Job[T]]:
        """The next batch: waiting requests in arrival order up to `max_batch` of weight
        (always at least one request); withdrawn ones are dropped."""
        jobs: list[_Job[T]] = []
        size = 0
        while self._jobs:
            job = self._jobs[0]
            if job.future.cancelled():
                self._jobs.popleft()
                self.backlog -= job.size
                continue
            if jobs and size + job.size > self.max_batch:
                break
            self._jobs.popleft()
            self.backlog -= job.size
            jobs.append(job)
            size += job.size
        self.running = size
        return jobs

    def _work(self) -> None:
        while True:
            with self._wake:
                while not self._jobs and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                jobs = self._take()
            if jobs:
                self._run(jobs)
            self.running, self.call_started = 0, None

    def _run(self, jobs: list[_Job[T]], rerun: bool = False) -> None:
        """One call for `jobs`; `rerun`: one request of a failed batch, run alone (the call
        under way, for /health's "stuck", is still the batch's: from its start)."""
        items = [x for job in jobs for x in job.items]
        start = time.perf_counter()
        if not rerun:
            self.call_started = start
        try:
            results = list(self.fn(items))
            if len(results) != len(items):
                raise BackendError(f"{len(results)} results for {len(items)} items")
        except Exception as e:  # noqa: BLE001  (delivered to the request that caused it)
            if len(jobs) > 1:  # find the request that fails, serve the others
                for job in jobs:
                    # one that timed out or whose client left: re-running it held the
                    # engine (a down generator's retries) from every live request
                    if not job.future.done():
                        self._run([job], rerun=True)
                return
            log.warning("request failed: %s", e, exc_info=not _expected(e))
            _deliver(jobs[0], exception=e)
            return
        size = sum(job.size for job in jobs)
        with self._wake:
            self.rates[size] = size / max(time.perf_counter() - start, 1e-6)
            self._refuse_late()
        at = 0
        for job in jobs:
            _deliver(job, (results[at : at + len(job.items)], start - job.queued))
            at += len(job.items)


def _expected(e: Exception) -> bool:
    from ..errors import RetrievalGateError

    return isinstance(e, RetrievalGateError)


def _deliver(job: _Job, result: Any = None, exception: Exception | None = None) -> None:
    def resolve() -> None:
        if job.future.done():  # the request timed out or its client left
            return
        if exception is not None:
            job.future.set_exception(exception)
        else:
            job.future.set_result(result)

    try:
        job.loop.call_soon_threadsafe(resolve)
    except RuntimeError:  # that request's event loop is closed
        pass
