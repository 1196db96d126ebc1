"""Ctrl-C in a verb whose threads wait on a generator server (serve's startup checks and
warm-up, rag's requests under way): Python's exit joins those threads, so the process
lingered, "interrupted" said, until every held request timed out."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def not_waiting_on_threads() -> Iterator[None]:
    """Within it, a KeyboardInterrupt leaves at exit without joining the threads started
    meanwhile (`_leave_started_threads`)."""
    before = set(threading.enumerate())
    try:
        yield
    except KeyboardInterrupt:
        _leave_started_threads(before)
        raise


def _leave_started_threads(before: set[threading.Thread]) -> None:
    """Ctrl-C while a generator server holds a request (startup's checks, the warm-up, a call
    under way when the server stops): Python's exit joins the threads waiting on it, so the
    process lingered, "interrupted" said, until --request-timeout. If threads started since
    `before` are still there when the interpreter exits, it runs its exit handlers (as
    `preload` does) and exits 130, the CLI's code for it, without them."""
    started = [t for t in threading.enumerate() if t not in before]
    if not started:
        return

    def leave() -> None:  # first at exit, in the main thread, before Python joins threads
        if not any(t.is_alive() for t in started):
            return
        atexit._run_exitfuncs()  # counters, engine shutdown: what the exit would run
        for stream in (sys.stdout, sys.stderr):  # the CLI's "interrupted" line, said
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(130)

    threading._register_atexit(leave)  # type: ignore[attr-defined]  # as concurrent.futures
