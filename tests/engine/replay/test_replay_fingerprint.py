"""The replay's fingerprint of a kept buffer (`replay/storage.py`): chunked sums equal whole ones and see a changed byte."""

from __future__ import annotations

import pytest
import torch

from kernelcraft.engine.replay import storage


def test_the_fingerprint_sums_in_chunks_what_a_whole_sum_gives_and_sees_one_changed_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t = torch.randint(0, 255, (1000, 36), dtype=torch.uint8).view(torch.float32)
    data = storage.whole(t)
    whole = (
        int(torch.sum(data, dtype=torch.int64)),
        int(torch.sum(data.view(torch.int32), dtype=torch.int64)),
    )
    monkeypatch.setattr(storage, "SUM_CHUNK", 1000)  # 36 chunks of bytes, 9 of words
    widest: list[int] = []
    real_sum = torch.sum

    def spy(x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        widest.append(x.numel())  # an int64 sum widens its whole input first: keep inputs small
        return real_sum(x, *args, **kwargs)

    monkeypatch.setattr(torch, "sum", spy)
    before = storage.fingerprint(t)
    monkeypatch.setattr(torch, "sum", real_sum)
    assert before[:2] == whole
    assert max(widest) <= 1000
    data[12345] += 1  # one byte, not on the sample's stride
    assert storage.fingerprint(t) != before
