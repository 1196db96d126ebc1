"""The Hugging Face Hub where it cannot be reached. Without a network (the Hub's name does not
resolve), `datasets` and transformers retried it for about 24 s before saying so; a load of a
Hub name is run in their offline mode there instead: what the Hugging Face cache holds loads,
anything else fails at once, and the caller names why."""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Iterator
from urllib.parse import urlparse


def unreachable() -> str | None:
    """Why the Hub's host cannot be reached (its name does not resolve), or None: reachable,
    or offline mode already on (the cache is read at once then)."""
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname
    if constants.HF_HUB_OFFLINE or not host:
        return None
    try:
        socket.getaddrinfo(host, 443)
    except OSError as e:
        return f"{host}: {e.strerror or e}"
    return None


@contextlib.contextmanager
def offline_when_unreachable() -> Iterator[str | None]:
    """Runs its block in offline mode (the cache only) when the Hub cannot be reached, and
    yields why (None: online as usual). The libraries read the offline variables when they are
    imported, so their flags are set here and put back after."""
    why = unreachable()
    if why is None:
        yield None
        return
    from huggingface_hub import constants

    flags = [(constants, "HF_HUB_OFFLINE")]
    if "datasets" in sys.modules:  # imported by the caller that needs it, never here
        flags.append((sys.modules["datasets"].config, "HF_HUB_OFFLINE"))
    before = [getattr(module, name) for module, name in flags]
    for module, name in flags:
        setattr(module, name, True)
    try:
        yield why
    finally:
        for (module, name), value in zip(flags, before, strict=True):
            setattr(module, name, value)
