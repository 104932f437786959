"""The private channel between the evaluator and its worker processes.

Every message is a frame: an 8-byte little-endian header length, a JSON header, then the binary
blobs the header lists (`"blobs": [len, ...]`). JSON, not pickle: a candidate process is hostile,
and unpickling its bytes would run its code in whoever reads them. Tensors travel as
`{"tensor": ...}` records inside the header: CPU tensors as raw bytes in a blob, CUDA tensors as
CUDA IPC handles (no copy; the receiver clones them at once). The parent routes frames between the
reference and the candidate worker without decoding tensors, so it never needs torch or CUDA.

Written by the evaluation engine only (the workers, `pool.py`, `jobworkers.py`); the headers are `protocol.py`'s.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

_LEN = struct.Struct("<Q")
MAX_HEADER_BYTES = 16 * 1024 * 1024
# What one frame may carry in blobs: generous for CPU tensors, tiny next to a hostile stream.
MAX_FRAME_BYTES = 8 * 1024**3


class ChannelError(Exception):
    """The peer closed the channel or sent something that is not a frame."""


@dataclass
class Frame:
    header: dict[str, Any]
    blobs: list[bytes] = field(default_factory=list)


def _encode(header: dict[str, Any], blobs: list[bytes]) -> list[bytes]:
    header = dict(header, blobs=[len(b) for b in blobs])
    raw = json.dumps(header, allow_nan=True).encode()
    return [_LEN.pack(len(raw)), raw, *blobs]


def _decode_header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise ChannelError(f"the peer sent a header that is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise ChannelError("the peer sent a header that is not a JSON object")
    lengths = header.get("blobs", [])
    if not isinstance(lengths, list) or not all(isinstance(n, int) and n >= 0 for n in lengths):
        raise ChannelError("the peer sent a header with malformed blob lengths")
    if sum(lengths) > MAX_FRAME_BYTES:
        raise ChannelError(f"the peer sent a frame of {sum(lengths)} bytes (limit {MAX_FRAME_BYTES})")
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


async def read_frame(reader: asyncio.StreamReader) -> Frame:
    try:
        (n,) = _LEN.unpack(await reader.readexactly(_LEN.size))
        if n > MAX_HEADER_BYTES:
            raise ChannelError(f"the peer sent a {n}-byte header (limit {MAX_HEADER_BYTES})")
        header = _decode_header(await reader.readexactly(n))
        blobs = [await reader.readexactly(k) for k in header.get("blobs", [])]
    except asyncio.IncompleteReadError as e:
        raise ChannelError("the channel closed") from e
    except ConnectionError as e:
        raise ChannelError(f"the channel broke: {e}") from e
    return Frame(header, blobs)


async def write_frame(
    writer: asyncio.StreamWriter, header: dict[str, Any], blobs: list[bytes] | None = None
) -> None:
    try:
        writer.writelines(_encode(header, blobs or []))
        await writer.drain()
    except ConnectionError as e:
        raise ChannelError(f"the channel broke: {e}") from e
