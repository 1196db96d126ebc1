"""Why a file's bytes are not the UTF-8 text a reader expects, said with the fix: a binary
format named by its first bytes, UTF-16 (with or without its byte-order mark), Windows-1252,
a stray NUL. Below every reader (the YAML configs' too), so each names the cause alike."""

from __future__ import annotations

from pathlib import Path

# Files that are not text, by their first bytes: the fix for each.
BINARY = {
    b"PAR1": "a Parquet file: pass it as --questions FILE.parquet",
    b"\x1f\x8b": "gzip-compressed: decompress it first (gunzip)",
    b"PK\x03\x04": "a zip archive (or .xlsx): unpack it, or save the sheet as .csv",
    b"SQLite format 3\x00": "an SQLite database (a tuning study or a cache?)",
}


def binary_kind(head: bytes) -> str | None:
    """What a file starting with `head` is, when its first bytes name a binary format."""
    return next((what for magic, what in BINARY.items() if head.startswith(magic)), None)


def not_utf8(data: bytes, start: int, path: str | Path | None = None) -> str:
    """Why `data` (a file, or one of its lines) is not UTF-8 and the command that fixes it: a
    UTF-16 file (Excel's "Unicode Text") shows its byte-order mark or NUL bytes; most others
    are Windows-1252 (Latin-1) text."""
    if what := binary_kind(data):  # an SQLite file's header holds a NUL too: not UTF-16
        return f"not text: this is {what}"
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in data[:64]:
        return (f"not valid UTF-8 (byte {start}): the file is UTF-16 (Excel's \"Unicode Text\" "
                f"saves so); re-encode it as UTF-8: {reencode('UTF-16', path)}")  # fmt: skip
    return (f"not valid UTF-8 (byte {start}); re-encode the file as UTF-8 (from Windows-1252 or "
            f"Latin-1: {reencode('CP1252', path)})")  # fmt: skip


def nul_byte(data: bytes, path: str | Path | None = None, start: int = 0) -> str | None:
    """Why text holding a raw NUL byte is refused (None: it holds none). No text format read
    here holds one (JSON escapes it as \\u0000): many NULs are UTF-16 saved without its
    byte-order mark (English text decodes as UTF-8, every other byte NUL), a few are damage.
    `start` is where `data` begins in its file: the first NUL's parity tells the byte order."""
    at = data.find(b"\x00")
    if at < 0:
        return None
    where = f"holds a NUL byte (byte {start + at})"
    window = data[at : at + 64]
    if window.count(b"\x00") * 4 < len(window):
        return f"{where}, which no text holds: the file is damaged; remove it or re-save the file"
    order = "UTF-16LE" if (start + at) % 2 else "UTF-16BE"
    return (
        f"{where}: this is UTF-16 text saved without its byte-order mark, not UTF-8; "
        f"re-encode it: {reencode(order, path)}"
    )


def reencode(encoding: str, path: str | Path | None = None) -> str:
    """The command that writes a UTF-8 copy of `path` (FILE.utf8.EXT) from `encoding`."""
    if path is None:
        return f"iconv -f {encoding} -t UTF-8 FILE > NEW"
    src = Path(path)
    return f"iconv -f {encoding} -t UTF-8 {src} > {src.with_name(f'{src.stem}.utf8{src.suffix}')}"
