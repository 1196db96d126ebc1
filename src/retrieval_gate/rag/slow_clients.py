"""Deadlines for each request's head and body on the HTTP server (`serve`).

uvicorn times only idle keep-alive connections: a client that opened a connection and sent
nothing, or half a request line and never the rest, held its socket (and a file descriptor)
for as long as it liked, so a few thousand such clients left the server no files to accept
real ones with. Here a connection whose next request head has not fully arrived
HEAD_TIMEOUT seconds after it opened, or after its last response, is closed; a body not
whole BODY_TIMEOUT seconds after the handler began reading it gets 408
(`service.BodyLimit`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

HEAD_TIMEOUT = 30.0  # seconds; nginx's client_header_timeout is 60
BODY_TIMEOUT = 30.0  # seconds for the whole body (1 MiB by default): nginx's is 60 between reads


def head_deadline_protocol(base: type[asyncio.Protocol] | None = None) -> type[asyncio.Protocol]:
    """`base` (default: uvicorn's choice, httptools where installed, else h11) with the
    deadline; pass it as `uvicorn.run(..., http=...)`."""
    if base is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol as base

    class HeadDeadline(base):  # type: ignore[misc,valid-type]
        """Both uvicorn protocols set `cycle` once a request head is complete and call
        `on_response_complete` after each response: a cycle unchanged since the deadline was
        set means no new request began."""

        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._set_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._set_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            self._cancel()  # a pending timer would keep the closed connection for 30 s

        def _set_deadline(self) -> None:
            self._cancel()
            self._deadline = self.loop.call_later(HEAD_TIMEOUT, self._expire, self.cycle)

        def _cancel(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self, waiting_on: Any) -> None:
            if self.cycle is waiting_on and not self.transport.is_closing():
                log.debug("closed a connection that sent no whole request in %g s", HEAD_TIMEOUT)
                self.transport.close()

    return HeadDeadline
