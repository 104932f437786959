"""The private channel between the evaluator and its worker processes.

Every message is a frame: an 8-byte little-endian header length, a JSON header, then the binary
blobs the header lists (`"blobs": [len, ...]`). JSON, not pickle: a candidate process is hostile,
and unpickling its bytes would run its code in whoever reads them. Tensors travel as
`{"tensor": ...}` records inside the header: CPU tensors as raw bytes in a blob, CUDA tensors as
CUDA IPC handles (no copy; the receiver clones them at once). The parent routes frames between the
reference and the candidate worker without decoding tensors, so it never needs torch or CUDA.

What the parent reads is bounded (`Bounds`, built per job by `bounds.py`): a frame's header by
its type (text frames small), its blobs by what the job expects of that type; the lengths are
checked before a byte of the blobs is read, which are then read in chunks. A frame over its
bounds is refused (`FrameRefused`): nothing more is read from that peer.

Written by the evaluation engine only (the workers, `pool.py`, `job/workers.py`); the headers are `protocol.py`'s.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_LEN = struct.Struct("<Q")
MAX_HEADER_BYTES = 4 * 1024 * 1024
"""The largest header of any frame (a worker's nested output records, a shrunk task's source)."""
TEXT_HEADER_BYTES = 256 * 1024
"""A frame whose type `Bounds` does not name: a short message or a trimmed error."""
MAX_FRAME_BYTES = 8 * 1024**3
"""What one frame may carry in blobs where no bounds are given (a trusted peer: the parent)."""
CHUNK_BYTES = 1024 * 1024
"""Blobs are read this much at a time: the reader's buffer stays small whatever a frame says."""


class ChannelError(Exception):
    """The peer closed the channel or sent something that is not a frame."""


class FrameRefused(ChannelError):
    """A frame over its bounds (`Bounds`): refused before its blobs are read."""


@dataclass(frozen=True)
class Bounds:
    """What one frame of each type may carry: its header's bytes (`headers`, else
    `text_header`) and its blobs' bytes in all (`blobs`, else none). `why` names where the blob
    bounds come from, for the refusal's words."""

    headers: Mapping[str, int] = field(default_factory=dict)
    blobs: Mapping[str, int] = field(default_factory=dict)
    text_header: int = TEXT_HEADER_BYTES
    why: str = ""

    def header_limit(self, kind: str) -> int:
        return min(MAX_HEADER_BYTES, self.headers.get(kind, self.text_header))

    def blob_limit(self, kind: str) -> int:
        return self.blobs.get(kind, 0)

    @property
    def largest_header(self) -> int:
        return min(MAX_HEADER_BYTES, max([self.text_header, *self.headers.values()]))


UNBOUNDED = Bounds(text_header=MAX_HEADER_BYTES, why="no bounds")
"""The old single limit, for a peer that is trusted."""


@dataclass
class Frame:
    header: dict[str, Any]
    blobs: list[bytes] = field(default_factory=list)


def _encode(header: dict[str, Any], blobs: list[bytes]) -> list[bytes]:
    header = dict(header, blobs=[len(b) for b in blobs])
    raw = json.dumps(header, allow_nan=True).encode()
    return [_LEN.pack(len(raw)), raw, *blobs]


def _decode_header(raw: bytes, bounds: Bounds | None = None) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise ChannelError(f"the peer sent a header that is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise ChannelError("the peer sent a header that is not a JSON object")
    lengths = header.get("blobs", [])
    if not isinstance(lengths, list) or not all(isinstance(n, int) and n >= 0 for n in lengths):
        raise ChannelError("the peer sent a header with malformed blob lengths")
    if bounds is None:
        if sum(lengths) > MAX_FRAME_BYTES:
            raise ChannelError(f"the peer sent a frame of {sum(lengths)} bytes (limit {MAX_FRAME_BYTES})")
        return header
    kind = str(header.get("type", header.get("op", "")))[:40]
    if len(raw) > bounds.header_limit(kind):
        raise FrameRefused(
            f"a {kind!r} frame with a {len(raw)}-byte header, over the {bounds.header_limit(kind)} "
            "bytes such a message may have"
        )
    limit = bounds.blob_limit(kind)
    if sum(lengths) > limit:
        expected = (
            f"over the {limit} this job expects of it" + (f" ({bounds.why})" if bounds.why else "")
            if limit
            else "where such a message carries none"
        )
        raise FrameRefused(f"a {kind!r} frame carrying {sum(lengths)} bytes of tensors, {expected}")
    return header


# ---- blocking side (workers) ----


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ChannelError("the channel closed mid-frame")
        got += k
    return bytes(buf)


def send_frame(sock: socket.socket, header: dict[str, Any], blobs: list[bytes] | None = None) -> None:
    for part in _encode(header, blobs or []):
        sock.sendall(part)


def recv_frame(sock: socket.socket) -> Frame:
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if n > MAX_HEADER_BYTES:
        raise ChannelError(f"the peer sent a {n}-byte header (limit {MAX_HEADER_BYTES})")
    header = _decode_header(_recv_exact(sock, n))
    return Frame(header, [_recv_exact(sock, k) for k in header.get("blobs", [])])


# ---- asyncio side (the parent) ----


async def read_frame(reader: asyncio.StreamReader, bounds: Bounds = UNBOUNDED) -> Frame:
    """The next frame, within `bounds` (`FrameRefused` when over them, before its blobs are read)."""
    try:
        (n,) = _LEN.unpack(await reader.readexactly(_LEN.size))
        if n > bounds.largest_header:
            raise FrameRefused(
                f"a frame with a {n}-byte header, over the {bounds.largest_header} any may have"
            )
        header = _decode_header(await reader.readexactly(n), bounds)
        blobs = [await _read_blob(reader, k) for k in header.get("blobs", [])]
    except asyncio.IncompleteReadError as e:
        raise ChannelError("the channel closed") from e
    except ConnectionError as e:
        raise ChannelError(f"the channel broke: {e}") from e
    return Frame(header, blobs)


async def _read_blob(reader: asyncio.StreamReader, n: int) -> bytes:
    """`n` bytes, read `CHUNK_BYTES` at a time into one buffer (the stream's own stays small)."""
    if n <= CHUNK_BYTES:
        return await reader.readexactly(n)
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        chunk = await reader.readexactly(min(CHUNK_BYTES, n - got))
        view[got : got + len(chunk)] = chunk
        got += len(chunk)
    return bytes(buf)  # (a copy: the frame's bounds hold its size)


async def write_frame(
    writer: asyncio.StreamWriter, header: dict[str, Any], blobs: list[bytes] | None = None
) -> None:
    try:
        writer.writelines(_encode(header, blobs or []))
        await writer.drain()
    except ConnectionError as e:
        raise ChannelError(f"the channel broke: {e}") from e
