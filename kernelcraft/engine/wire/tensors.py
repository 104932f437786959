"""Tensors and nested outputs to and from channel frames, without pickle.

`pack` turns a forward's result (a tensor, or tuples/lists/dicts of tensors and plain numbers)
into a JSON-able record plus blobs; `unpack` rebuilds it. CPU tensors travel as raw bytes; CUDA
tensors as CUDA IPC handles (zero copy), which the receiver must clone before the sender goes on.
Only plain `torch.Tensor` with a known dtype is rebuilt: a record that names anything else is
refused, so a hostile sender cannot make the reader construct arbitrary objects.

Runs inside worker processes only (it imports torch). Written by the evaluation engine.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
        torch.complex128,
    )
}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        DTYPES[_name] = getattr(torch, _name)


class PackError(Exception):
    """A value cannot travel: an unknown type, or a malformed record."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def pack(obj: Any, blobs: list[bytes], *, cuda_ipc: bool) -> Any:
    """A JSON-able record of `obj`; tensor bytes are appended to `blobs`."""
    if isinstance(obj, torch.Tensor):
        rec: dict[str, Any] = {
            "dtype": dtype_name(obj.dtype),
            "shape": list(obj.shape),
            "exact_type": type(obj) is torch.Tensor,
            "device": str(obj.device),
        }
        t = obj.detach()
        if type(t) is not torch.Tensor:
            # A subclass (lazy tensors, spoofed comparisons): send its materialised data.
            t = t.as_subclass(torch.Tensor)
        if t.is_cuda and cuda_ipc:
            rec["ipc"] = _ipc_record(t)
        else:
            flat = t.contiguous().cpu().reshape(-1)
            rec["blob"] = len(blobs)
            blobs.append(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
        return {"tensor": rec}
    if isinstance(obj, (tuple, list)):
        return {"seq": [pack(x, blobs, cuda_ipc=cuda_ipc) for x in obj], "tuple": isinstance(obj, tuple)}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise PackError("dict outputs need string keys")
        return {"dict": {k: pack(v, blobs, cuda_ipc=cuda_ipc) for k, v in obj.items()}}
    if obj is None or isinstance(obj, (bool, int, str)):
        return {"py": obj}
    if isinstance(obj, float):
        return {"py": obj} if math.isfinite(obj) else {"float": repr(obj)}
    raise PackError(f"cannot send a value of type {type(obj).__name__}")


def _ipc_record(t: torch.Tensor) -> dict[str, Any]:
    from torch.multiprocessing.reductions import reduce_tensor

    _, args = reduce_tensor(t)
    (
        _,
        size,
        stride,
        offset,
        storage_cls,
        _,
        device,
        handle,
        nbytes,
        off_bytes,
        _,
        rc_handle,
        rc_off,
        ev,
        ev_sync,
    ) = args

    def b64(x: bytes | None) -> str | None:
        return None if x is None else base64.b64encode(x).decode()

    return {
        "size": list(size),
        "stride": list(stride),
        "offset": int(offset),
        "storage_cls": storage_cls.__name__,
        "device": int(device),
        "handle": b64(handle),
        "nbytes": int(nbytes),
        "offset_bytes": int(off_bytes),
        "rc_handle": b64(rc_handle),
        "rc_offset": int(rc_off),
        "event": b64(ev),
        "event_sync": bool(ev_sync),
    }


def _tensor_from_record(rec: dict[str, Any], blobs: list[bytes]) -> torch.Tensor:
    dtype = DTYPES.get(rec.get("dtype", ""))
    if dtype is None:
        raise PackError(f"unknown dtype {rec.get('dtype')!r}")
    shape = rec.get("shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise PackError("malformed shape")
    if "ipc" in rec:
        return _from_ipc(rec["ipc"], dtype, shape)
    idx = rec.get("blob")
    if not isinstance(idx, int) or not 0 <= idx < len(blobs):
        raise PackError("tensor record points at no blob")
    raw = blobs[idx]
    numel = math.prod(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(raw) != numel * itemsize:
        raise PackError(f"tensor of shape {shape} and dtype {rec['dtype']} came with {len(raw)} bytes")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


def _from_ipc(ipc: dict[str, Any], dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    storage_cls = {"TypedStorage": torch.storage.TypedStorage, "UntypedStorage": torch.UntypedStorage}.get(
        ipc.get("storage_cls", "")
    )
    if storage_cls is None or list(ipc.get("size", [])) != shape:
        raise PackError("malformed CUDA IPC record")

    def unb64(x: str | None) -> bytes | None:
        return None if x is None else base64.b64decode(x)

    t = rebuild_cuda_tensor(
        torch.Tensor,
        torch.Size(shape),
        tuple(int(s) for s in ipc["stride"]),
        int(ipc["offset"]),
        storage_cls,
        dtype,
        int(ipc["device"]),
        unb64(ipc["handle"]),
        int(ipc["nbytes"]),
        int(ipc["offset_bytes"]),
        False,
        unb64(ipc["rc_handle"]),
        int(ipc["rc_offset"]),
        unb64(ipc["event"]),
        bool(ipc["event_sync"]),
    )
    if type(t) is not torch.Tensor:
        raise PackError("CUDA IPC record did not rebuild a plain tensor")
    return t


def unpack(rec: Any, blobs: list[bytes]) -> Any:
    """Rebuild what `pack` recorded. CUDA tensors alias the sender's memory: clone before use."""
    if not isinstance(rec, dict) or len(rec) == 0:
        raise PackError("malformed record")
    if "tensor" in rec:
        return _tensor_from_record(rec["tensor"], blobs)
    if "seq" in rec:
        items = [unpack(x, blobs) for x in rec["seq"]]
        return tuple(items) if rec.get("tuple") else items
    if "dict" in rec:
        return {str(k): unpack(v, blobs) for k, v in rec["dict"].items()}
    if "py" in rec:
        v = rec["py"]
        if v is not None and not isinstance(v, (bool, int, float, str)):
            raise PackError("malformed plain value")
        return v
    if "float" in rec:
        return float(rec["float"])
    raise PackError("malformed record")


def leaves(obj: Any) -> list[Any]:
    """The leaves of a nested output in a fixed order."""
    if isinstance(obj, (tuple, list)):
        return [x for item in obj for x in leaves(item)]
    if isinstance(obj, dict):
        return [x for k in sorted(obj) for x in leaves(obj[k])]
    return [obj]


def exact_types(rec: Any) -> bool:
    """Whether every tensor in a packed record was a plain torch.Tensor at the sender."""
    if isinstance(rec, dict):
        if "tensor" in rec:
            return bool(rec["tensor"].get("exact_type", False))
        if "seq" in rec:
            return all(exact_types(x) for x in rec["seq"])
        if "dict" in rec:
            return all(exact_types(x) for x in rec["dict"].values())
    return True
