"""Read one PyTorch profiler trace (Kineto's Chrome-trace JSON, plain or gzipped) without loading it whole.

A rank's trace can be gigabytes; `json.load` would hold the text and every event as a dict at once. This reader
streams: it walks the top-level object key by key, decodes the `traceEvents` array one event at a time
(`json.JSONDecoder.raw_decode` on a sliding buffer), and keeps only the few fields of the events a diagnosis needs
as small tuples. Pure Python and the standard library only (no torch, no numpy): the same code runs under Pyodide in
a reader's browser.

What it keeps, per complete event (`"ph": "X"`): start and end (µs), category, name, thread. And the metadata
Kineto writes beside the events: `distributedInfo` (rank, world size, backend) and `deviceProperties` (GPUs).
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_TRACE_BYTES = 1 << 30  # 1 GiB of JSON per rank (after gunzip): beyond it the reader refuses rather than swaps
MAX_VALUE_BYTES = 64 << 20  # one top-level value other than traceEvents, or one event, larger than this is not Kineto
CHUNK_CHARS = 1 << 20
KEPT_CATEGORIES = frozenset(
    {
        "cpu_op",
        "user_annotation",
        "gpu_user_annotation",
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "cuda_runtime",
        "cuda_driver",
    }
)


class TraceError(ValueError):
    """A file that is not a readable trace: the command prints it as one line and exits 2."""


@dataclass(frozen=True, kw_only=True)
class Trace:
    """One rank's trace, reduced to what a diagnosis reads. `events`: (start_us, end_us, cat, name, thread), sorted
    by start; `thread` is "pid/tid" (for GPU events pid is the device and tid the stream)."""

    path: str
    rank: int | None
    world_size: int | None
    backend: str | None
    events: list[tuple[float, float, str, str, str]] = field(repr=False)
    gpus: int
    bytes_read: int


class _Stream:
    """Characters from a text stream, with a sliding buffer: `value()` decodes one JSON value at the cursor."""

    def __init__(self, text: io.TextIOBase, on_chunk: Callable[[], None]):
        self.text, self.on_chunk = text, on_chunk
        self.buf, self.pos, self.eof = "", 0, False
        self.decoder = json.JSONDecoder()

    def fill(self) -> None:
        if self.eof:
            return
        data = self.text.read(CHUNK_CHARS)
        self.on_chunk()
        if not data:
            self.eof = True
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        if len(self.buf) > MAX_VALUE_BYTES:
            raise TraceError(f"one JSON value is larger than {MAX_VALUE_BYTES >> 20} MiB: not a Kineto trace")

    def peek(self) -> str:
        """The next non-blank character ('' at the end), without consuming it."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos] if self.pos < len(self.buf) else ""
            self.fill()

    def expect(self, chars: str) -> str:
        c = self.peek()
        if not c or c not in chars:
            raise TraceError(f"not JSON of a trace: expected {' or '.join(repr(x) for x in chars)}, found {c!r}")
        self.pos += 1
        return c

    def value(self):
        self.peek()
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.eof:
                    raise TraceError(f"not valid JSON: {exc.msg} (near character {exc.pos})") from None
                self.fill()
                continue
            if end >= len(self.buf) and not self.eof:  # a number may continue in the next chunk
                self.fill()
                continue
            self.pos = end
            return obj


def _open_text(path: str) -> tuple[io.TextIOBase, io.BufferedReader, int]:
    size = os.path.getsize(path)
    raw = open(path, "rb")  # closed by read_trace
    gz = raw.read(2) == b"\x1f\x8b"
    raw.seek(0)
    if not gz and size > MAX_TRACE_BYTES:
        raw.close()
        raise TraceError(
            f"{path}: {size / 2**30:.1f} GiB is more than the {MAX_TRACE_BYTES >> 30} GiB a rank's trace may be: "
            "record fewer steps (torch.profiler's schedule: active=2-3) or a smaller window"
        )
    binary = gzip.GzipFile(fileobj=raw) if gz else raw
    return io.TextIOWrapper(binary, encoding="utf-8", errors="strict"), raw, size


def read_trace(path: str, progress: Callable[[int, int], None] | None = None) -> Trace:
    """Stream one trace file; `progress(bytes_done, bytes_total)` is called as the file is read."""
    try:
        text, raw, size = _open_text(path)
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None
    with raw:
        try:
            return _read(path, text, raw, size, progress)
        except UnicodeDecodeError:
            raise TraceError(f"{path}: not a text file (not UTF-8 JSON)") from None
        except (OSError, EOFError) as exc:  # a truncated or corrupt gzip stream
            raise TraceError(f"{path}: cannot read it: {exc}") from None
        except TraceError as exc:
            raise TraceError(f"{path}: {exc}") from None


def _read(path, text, raw, size, progress) -> Trace:
    decoded = [0]

    def on_chunk() -> None:
        decoded[0] += CHUNK_CHARS
        if decoded[0] > MAX_TRACE_BYTES:
            raise TraceError(f"more than {MAX_TRACE_BYTES >> 30} GiB of JSON after decompression: refused")
        if progress:
            progress(min(raw.tell(), size), size)

    s = _Stream(text, on_chunk)
    events: list[tuple[float, float, str, str, str]] = []
    meta: dict = {}
    first = s.expect("{[")
    if first == "[":  # the Chrome trace "JSON Array Format": events only
        _events(s, events, opened=True)
    else:
        while s.peek() != "}":
            key = s.value()
            if not isinstance(key, str):
                raise TraceError("not JSON of a trace: an object key is not a string")
            s.expect(":")
            if key == "traceEvents":
                _events(s, events)
            else:
                meta[key] = s.value()
            if s.expect(",}") == "}":
                break
        else:
            s.expect("}")
    if s.peek():
        raise TraceError("not valid JSON: more text after the trace's object")
    if progress:
        progress(size, size)
    info = meta.get("distributedInfo") or {}
    events.sort()
    return Trace(
        path=path,
        rank=_int(info.get("rank")),
        world_size=_int(info.get("world_size")),
        backend=info.get("backend") if isinstance(info.get("backend"), str) else None,
        events=events,
        gpus=len(meta.get("deviceProperties") or []),
        bytes_read=size,
    )


def _int(x) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _events(s: _Stream, out: list, opened: bool = False) -> None:
    if not opened:
        s.expect("[")
    if s.peek() == "]":
        s.pos += 1
        return
    while True:
        e = s.value()
        if isinstance(e, dict) and e.get("ph") == "X":
            cat = e.get("cat")
            if cat in KEPT_CATEGORIES or str(e.get("name", "")).startswith("ProfilerStep#"):
                try:
                    start, dur = float(e["ts"]), float(e.get("dur", 0.0))
                except (KeyError, TypeError, ValueError):
                    raise TraceError("an event without a numeric 'ts'") from None
                thread = f"{e.get('pid')}/{e.get('tid')}"
                out.append((start, start + max(dur, 0.0), str(cat), str(e.get("name", "")), thread))
        if s.expect(",]") == "]":
            return
