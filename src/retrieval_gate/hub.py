"""The Hugging Face Hub where it cannot be reached. Without a network (the Hub's name does not
resolve), `datasets` and transformers retried it for about 24 s before saying so, and vLLM,
listing a cached model's files, for minutes before failing. So the first load of a Hub name
checks the Hub once and, where it cannot be reached, turns offline mode on for the rest of the
process and the engines it starts: what the Hugging Face cache holds loads at once, anything
else fails at once, and the caller names why. A gate's Hub id also asks the Hub's endpoint
for an answer within huggingface_hub's metadata timeout (`silent`): one that takes the
connection and never answers hung `snapshot_download` for good. A generator's Hub name asks it
too (`offline_when_unreachable(probe=True)`): refused or silent, offline mode as well."""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import urllib.error
import urllib.request
from urllib.parse import urlparse

log = logging.getLogger(__name__)


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


def silent(endpoint: str | None = None) -> str | None:
    """Why the Hub's endpoint did not answer in time, or None: it answered (any HTTP status),
    or failed at once (refused, no route: left to huggingface_hub, which falls back to its
    cache). `snapshot_download` first asks `repo_info` through a client with no timeout,
    so a host that takes the connection and never answers (a stalled proxy or mirror, a
    firewall that drops) hung a load for good."""
    kind, why = _head(endpoint)
    return why if kind == "silent" else None


def _head(endpoint: str | None = None) -> tuple[str, str | None]:
    """One HEAD request to the Hub's endpoint, bounded as huggingface_hub bounds its own
    metadata requests (HF_HUB_ETAG_TIMEOUT, 10 s by default) for the connection and for the
    answer; the environment's proxies apply, as they do to huggingface_hub. ("answered",
    None): any HTTP status; ("silent", why): no answer in time; ("failed", why): refused,
    reset, no route; ("malformed", why): an endpoint urllib cannot ask."""
    from huggingface_hub import constants

    url = (endpoint or constants.ENDPOINT).rstrip("/") + "/"
    timeout = float(getattr(constants, "HF_HUB_ETAG_TIMEOUT", 10) or 10)
    no_answer = f"no answer within {timeout:g} s (HF_HUB_ETAG_TIMEOUT)"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return "answered", None
    except TimeoutError:  # the connection taken, no answer
        return "silent", no_answer
    except urllib.error.HTTPError as e:  # an answer, if an error status
        e.close()
        return "answered", None
    except urllib.error.URLError as e:
        if isinstance(e.reason, TimeoutError):  # no connection within the timeout
            return "silent", no_answer
        return "failed", str(getattr(e.reason, "strerror", None) or e.reason)
    except ValueError as e:
        return "malformed", str(e)
    except OSError as e:  # refused, reset
        return "failed", str(e.strerror or e)


_WENT_OFFLINE: dict[str, str] = {}  # "why": set once this process turned offline mode on


def offline_when_unreachable(probe: bool = False) -> str | None:
    """Offline mode from here on when the Hub cannot be reached: why (None: online as usual,
    or offline by the user's own setting). `probe`: its endpoint must also answer one bounded
    HEAD request (`_head`); refused or silent, huggingface_hub retried each file for minutes
    (a model's load, 2 min where refused) or waited for good. The libraries read their
    offline flags when imported, so the flags are set where they keep them, and the variable
    for the processes an engine starts."""
    if "why" in _WENT_OFFLINE:
        return _WENT_OFFLINE["why"]
    why = unreachable()
    if why is None and probe:
        from huggingface_hub import constants

        if not constants.HF_HUB_OFFLINE:
            kind, reason = _head()
            why = f"{constants.ENDPOINT}: {reason}" if kind in ("silent", "failed") else None
    if why is None:
        return None
    _WENT_OFFLINE["why"] = why
    from huggingface_hub import constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True
    if "datasets" in sys.modules:  # imported by the caller that needs it, never here
        sys.modules["datasets"].config.HF_HUB_OFFLINE = True
    log.info(f"the Hugging Face Hub cannot be reached ({why}): Hub names are read from the "
             "Hugging Face cache alone from here on (offline mode)")  # fmt: skip
    return why


# huggingface_hub's hint in offline mode, wrong when this tool turned it on: the Hub cannot be
# reached, so HF_HUB_OFFLINE=0 changes nothing
_OFFLINE_HINT = re.compile(r"\s*[^.;]*HF_HUB_OFFLINE=0[^.;]*[.;]?")
OFFLINE_FIX = ("check the network, or put the model in the Hugging Face cache (download it where "
               "the Hub can be reached) or in a folder and pass that")  # fmt: skip


def without_offline_hint(message: str) -> str:
    """huggingface_hub's error without its 'set HF_HUB_OFFLINE=0' advice."""
    return _OFFLINE_HINT.sub("", message).rstrip(" .;:") or message
