"""Atomic files and folders: whole or nothing, with the modes the user's umask implies."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from retrieval_gate.errors import InputError
from retrieval_gate.fileio import atomic_path, staged_folder, write_json, write_text


@pytest.fixture(params=[0o022, 0o027, 0o077])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_writer_gives_the_umask_mode_like_open(tmp_path, umask):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # what a plain open() gives under this umask
    assert mode(write_text(tmp_path / "a.txt", "x")) == mode(plain) == 0o666 & ~umask
    assert mode(write_json(tmp_path / "deeper" / "b.json", {})) == 0o666 & ~umask
    assert mode(tmp_path / "deeper") == 0o777 & ~umask
    with atomic_path(tmp_path / "c.bin") as tmp:
        tmp.write_bytes(b"1")
    assert mode(tmp_path / "c.bin") == 0o666 & ~umask
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left


def test_staged_folder_replaces_whole_and_keeps_the_old_one_on_error(tmp_path, umask):
    target = tmp_path / "out"
    with staged_folder(target) as stage:
        (stage / "one").write_text("1")
    assert mode(target) == 0o777 & ~umask and sorted(os.listdir(target)) == ["one"]
    with pytest.raises(RuntimeError), staged_folder(target) as stage:
        (stage / "two").write_text("2")
        raise RuntimeError("crash mid-write")
    assert sorted(os.listdir(target)) == ["one"]  # the old folder, untouched
    with staged_folder(target) as stage:
        (stage / "two").write_text("2")
    assert sorted(os.listdir(target)) == ["two"]  # replaced whole, nothing of the old one
    assert os.listdir(tmp_path) == ["out"]  # no staging folder left behind


def test_staged_folder_removes_what_a_killed_run_left_and_refuses_a_file(tmp_path):
    target = tmp_path / "out"
    dead = tmp_path / ".out.staging-999999999-abc"  # no such process
    dead.mkdir()
    (dead / "half.onnx").write_text("half")
    other = tmp_path / ".other.staging-999999999-abc"  # another target's: not ours to touch
    other.mkdir()
    with staged_folder(target) as stage:
        (stage / "x").write_text("1")
    assert not dead.exists() and other.exists()
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    with pytest.raises(InputError, match="is a file"), staged_folder(a_file):
        pass
    assert a_file.read_text() == "mine"


def _full_disk(monkeypatch, path: Path) -> None:
    """`path`'s file system reports no free space (a real full disk needs a mount: root)."""
    real = os.statvfs
    full = os.statvfs_result((4096, 4096, 1000, 0, 0, 100, 0, 0, 0, 255))  # no block free
    monkeypatch.setattr(os, "statvfs", lambda p: full if str(p).startswith(str(path)) else real(p))


def test_a_write_that_fills_the_disk_names_its_output_not_a_bug(tmp_path, monkeypatch):
    """On a full disk torch.save raised RuntimeError("... unexpected pos ..."), the tokenizers
    a bare Exception("No space left on device (os error 28)"): `train` said "internal error (a
    bug)" and the run was lost unexplained; Python's own writes said "no space left" naming no
    file, and a copy into the disk (Lightning's checkpoint) named its source in /tmp."""
    import errno

    from retrieval_gate.errors import os_error

    target = tmp_path / "run" / "gate.pt"
    with pytest.raises(RuntimeError, match="unexpected pos"), atomic_path(target):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos")
    _full_disk(monkeypatch, tmp_path)  # the same failure where the disk is full: said so
    with pytest.raises(InputError, match="no space left") as said, atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos")
    assert str(said.value).startswith(f"{target}: no space left on the device")
    assert os.listdir(tmp_path / "run") == []  # the half-written file is gone
    with pytest.raises(InputError, match="no space left") as said, staged_folder(tmp_path / "t"):
        raise Exception("No space left on device (os error 28)")  # the tokenizers' own
    assert str(said.value).startswith(f"{tmp_path / 't'}: no space left")
    with pytest.raises(InputError) as said, atomic_path(target):
        raise OSError(errno.ENOSPC, "No space left on device")  # a write: no file named
    assert str(said.value).startswith(f"{target}: no space left")
    copy = OSError(errno.ENOSPC, "No space left on device", "/tmp/tmpab12", None, "/d/best.ckpt")
    assert str(os_error(copy)).startswith("/d/best.ckpt: no space left")


def test_rag_progress_on_a_full_disk_names_its_file(tmp_path, monkeypatch):
    """`rag --out`'s progress file: a mode's result appended on a full disk said "no space
    left on the device" naming no file."""
    import errno
    import io

    from retrieval_gate.rag import experiment

    class Full(io.BufferedRandom):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(experiment, "open", lambda p, mode: Full(io.FileIO(p, "a+")),
                        raising=False)  # fmt: skip
    result = type("Result", (), {"to_dict": lambda self: {"mode": "never"}})()
    path = tmp_path / "rag.modes.jsonl"
    with pytest.raises(InputError) as said:
        experiment._append_progress(path, "key", result)
    assert str(said.value).startswith(f"{path}: no space left on the device")


def test_a_device_pipe_or_socket_is_never_replaced_by_a_file(tmp_path):
    """An output named by a FIFO (or /dev/full, a socket) would have been renamed over: the
    node gone, a file in its place. It is refused, and left as it was."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="pipe: is not a regular file"):
        write_text(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temp file left


def test_a_symbolic_link_is_written_through_and_stays_a_link(tmp_path):
    target, link = tmp_path / "real.txt", tmp_path / "link.txt"
    target.write_text("old")
    link.symlink_to(target)
    write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    dangling = tmp_path / "dangling.txt"
    dangling.symlink_to(tmp_path / "no" / "such" / "file.txt")
    with pytest.raises(InputError, match="dangling.txt: is a symbolic link to .* which does not"):
        write_text(dangling, "x")
    assert dangling.is_symlink() and not (tmp_path / "no").exists()
