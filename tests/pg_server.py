"""A throw-away PostgreSQL server for the tuning tests: a fresh cluster in a temporary folder,
on a free loopback port, run as the `postgres` user (initdb and postgres refuse root), stopped
and removed at the end. Binaries: PATH, else Debian's /usr/lib/postgresql/<version>/bin
(scripts/setup.sh installs the `postgresql` package where neither has them)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def pg_bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed: apt-get install postgresql")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(*cmd: str) -> list[str]:
    return list(cmd) if os.geteuid() else ["runuser", "-u", "postgres", "--", *cmd]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Yields `postgresql://postgres@127.0.0.1:<port>/postgres` (trust authentication)."""
    root = Path(tempfile.mkdtemp(prefix="rg-pg-"))
    data, port = root / "data", free_port()
    if not os.geteuid():
        shutil.chown(root, "postgres", "postgres")
    try:
        subprocess.run(_as_postgres(pg_bin("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"),
                       check=True, capture_output=True, cwd=root)  # fmt: skip
        opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(_as_postgres(pg_bin("pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start"),
                       check=True, capture_output=True, cwd=root)  # fmt: skip
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(_as_postgres(pg_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"),
                           capture_output=True, cwd=root)  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":  # a server for a manual run: prints its URL, stops on Enter
    with postgres_server() as url:
        print(url, flush=True)
        input()
