"""Load and abuse test for `retrieval-gate serve` on this machine (127.0.0.1 only).

    python scripts/load_serve.py --url http://127.0.0.1:8000 --clients 100 --requests 1
    python scripts/load_serve.py --url http://127.0.0.1:8000 --probes-only

The burst: `--clients` concurrent clients each send `--requests` one-question `/answer`
requests (real RetrievalQA/PopQA test questions), while a thread polls `/health` every 0.1 s
and one client sends a one-question `/score` request every 0.05 s. Reported: p50/p99/max of
`/answer` and `/score`, the 429 count (and other failures), the slowest `/health` answer
during the burst, and whether the server is up afterwards. Bounded in count (clients x
requests) and time (`--max-seconds`; what is still running then is cancelled and counted).

The probes (also run before the burst unless `--no-probes`): a lone surrogate, a 998-character
question whose prompt with its documents overflows the generator's 4,096-token context, and a 200 MB body (sent over a raw
socket in 1 MB chunks until the server answers or hangs up)."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

FALLBACK = ["Who wrote Hamlet?", "What is the capital of France?", "Who won the 2022 World Cup?"]


@dataclass
class Burst:
    answer: list[float] = field(default_factory=list)  # seconds of each 200 answer
    score: list[float] = field(default_factory=list)
    health: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)  # "/answer 429" -> count
    health_failures: int = 0
    cancelled: int = 0

    def count(self, key: str) -> None:
        self.statuses[key] = self.statuses.get(key, 0) + 1


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def questions(n: int) -> list[str]:
    try:
        from retrieval_gate.rag.sample import select_questions

        found = [q.text for q in select_questions(["retrievalqa", "popqa"], "test", limit=n)]
    except Exception as e:  # noqa: BLE001  (the datasets are optional for a load test)
        print(f"(no dataset questions: {e}; using {len(FALLBACK)} fixed ones)", file=sys.stderr)
        found = []
    found = found or FALLBACK
    return [found[i % len(found)] for i in range(n)]


async def timed(client: httpx.AsyncClient, method: str, path: str, **kw) -> tuple[float, int]:
    start = time.perf_counter()
    r = await client.request(method, path, **kw)
    return time.perf_counter() - start, r.status_code


async def run_burst(url: str, clients: int, per_client: int, max_seconds: float, headers) -> Burst:
    out = Burst()
    texts = questions(clients * per_client)
    done = asyncio.Event()
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    timeout = httpx.Timeout(max_seconds, connect=30)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, timeout=timeout
    ) as client:

        async def post(path: str, text: str, into: list[float]) -> int | None:
            try:
                seconds, status = await timed(client, "POST", path, json={"questions": [text]})
            except httpx.HTTPError as e:
                out.count(f"{path} {type(e).__name__}")
                return None
            out.count(f"{path} {status}")
            if status == 200:
                into.append(seconds)
            return status

        async def answerer(i: int) -> None:
            for j in range(per_client):
                await post("/answer", texts[i * per_client + j], out.answer)

        async def scorer() -> None:
            while not done.is_set():  # (a server without /score is not hammered)
                if await post("/score", texts[0], out.score) == 404:
                    return
                await asyncio.sleep(0.05)

        stop = threading.Event()
        prober = threading.Thread(target=probe_health, args=(url, out, stop))
        prober.start()
        side = asyncio.create_task(scorer())
        tasks = [asyncio.create_task(answerer(i)) for i in range(clients)]
        _, pending = await asyncio.wait(tasks, timeout=max_seconds)
        for t in pending:
            t.cancel()
        out.cancelled = len(pending)
        done.set()
        stop.set()
        await asyncio.gather(side, *pending, return_exceptions=True)
        prober.join()
    return out


def probe_health(url: str, out: Burst, stop: threading.Event) -> None:
    """GET /health every 0.1 s on its own thread and connection, so the clients' event loop
    does not delay it (a failure or a 10 s timeout counts as 10 s)."""
    with httpx.Client(base_url=url, timeout=10) as client:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                ok = client.get("/health").status_code == 200
            except httpx.HTTPError:
                ok = False
            out.health.append(time.perf_counter() - start if ok else 10.0)
            out.health_failures += not ok
            stop.wait(0.1)


def probe_json(url: str, body: bytes, headers: dict) -> dict:
    start = time.perf_counter()
    try:
        r = httpx.post(
            f"{url}/answer",
            content=body,
            headers={"content-type": "application/json", **headers},
            timeout=600,
        )
    except httpx.HTTPError as e:
        return {"error": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - start}
    try:
        detail = r.json()
    except ValueError:
        detail = r.text[:200]
    return {
        "status": r.status_code,
        "seconds": round(time.perf_counter() - start, 3),
        "body": detail,
    }


def probe_big_body(url: str, size: int, headers: dict) -> dict:
    """Declares `size` bytes and streams them; stops at the first byte of a response."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=600)
    head = (
        f"POST /answer HTTP/1.1\r\nHost: {parts.hostname}\r\nContent-Type: application/json\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        + f"Content-Length: {size}\r\nConnection: close\r\n\r\n"
    )
    chunk = b"a" * (1 << 20)
    body_start = b'{"questions": ["'
    start, sent = time.perf_counter(), 0
    sock.sendall(head.encode())
    reply = b""
    try:
        sock.sendall(body_start)
        sent = len(body_start)
        while sent < size:
            sock.setblocking(False)
            try:
                reply = sock.recv(4096)
            except BlockingIOError:
                reply = b""
            sock.setblocking(True)
            if reply:
                break
            piece = chunk[: min(len(chunk), size - sent - 3)] if size - sent > 3 else b'"]}'
            sock.sendall(piece)
            sent += len(piece)
        if not reply:
            sock.settimeout(600)
            reply = sock.recv(4096)
    except (BrokenPipeError, ConnectionResetError):
        try:
            reply = sock.recv(4096)
        except OSError:
            pass
    finally:
        sock.close()
    status = reply.split(b"\r\n", 1)[0].decode(errors="replace")
    return {
        "status_line": status,
        "seconds": round(time.perf_counter() - start, 3),
        "bytes_sent_before_reply": sent,
    }


def run_probes(url: str, headers: dict) -> dict:
    # 998 characters: ~3,900 tokens alone, and BM25 finds Hamlet documents for it, so its
    # with-context prompt overflows a 4,096-token window
    overflow = "Who wrote Hamlet? " + "\U00013000" * 980
    return {
        "lone surrogate": probe_json(
            url, b'{"questions": ["Who wrote Hamlet?", "bad \\ud800 text"]}', headers
        ),
        "998-char question": probe_json(
            url, json.dumps({"questions": ["Who wrote Hamlet?", overflow]}).encode(), headers
        ),
        "200 MB body": probe_big_body(url, 200 * (1 << 20), headers),
    }


def report(burst: Burst, up_after: bool, wall: float) -> dict:
    def ms(x: float | None) -> float | None:
        return None if x is None else round(1000 * x, 1)

    return {
        "answer_ok": len(burst.answer),
        "answer_p50_ms": ms(percentile(burst.answer, 0.5)),
        "answer_p99_ms": ms(percentile(burst.answer, 0.99)),
        "answer_max_ms": ms(max(burst.answer, default=None)),
        "score_ok": len(burst.score),
        "score_p50_ms": ms(percentile(burst.score, 0.5)),
        "score_p99_ms": ms(percentile(burst.score, 0.99)),
        "http_429": sum(v for k, v in burst.statuses.items() if k.endswith(" 429")),
        "statuses": burst.statuses,
        "cancelled_clients": burst.cancelled,
        "health_checks": len(burst.health),
        "health_max_ms": ms(max(burst.health, default=None)),
        "health_mean_ms": ms(statistics.fmean(burst.health) if burst.health else None),
        "health_failures": burst.health_failures,
        "up_after": up_after,
        "wall_seconds": round(wall, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--requests", type=int, default=1, help="one-question requests per client")
    p.add_argument("--max-seconds", type=float, default=600, help="bound on the burst")
    p.add_argument("--api-key", help="bearer token, if the server has one")
    p.add_argument("--no-probes", action="store_true")
    p.add_argument("--probes-only", action="store_true")
    p.add_argument("--out", help="also write the figures to this JSON file")
    args = p.parse_args()
    host = urlsplit(args.url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        p.error(f"--url must point at this machine (127.0.0.1), got {host}")
    if not (1 <= args.clients <= 1000 and 1 <= args.requests <= 100 and args.max_seconds > 0):
        p.error("--clients 1-1000, --requests 1-100 and a positive --max-seconds")
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    figures: dict = {"url": args.url, "clients": args.clients, "requests": args.requests}
    if not args.no_probes:
        figures["probes"] = run_probes(args.url, headers)
        print(json.dumps(figures["probes"], indent=1, ensure_ascii=False)[:3000])
    if not args.probes_only:
        start = time.perf_counter()
        burst = asyncio.run(
            run_burst(args.url, args.clients, args.requests, args.max_seconds, headers)
        )
        wall = time.perf_counter() - start
        try:
            up = httpx.get(f"{args.url}/health", timeout=10).status_code == 200
        except httpx.HTTPError:
            up = False
        figures["burst"] = report(burst, up, wall)
        print(json.dumps(figures["burst"], indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=1, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
