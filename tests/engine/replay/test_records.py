"""The parent keeps every trial's record for the fresh replay (`replay/records.py`): each distinct
one once, only the kept tensors' bytes, each of those once across records."""

from __future__ import annotations

from kernelcraft.engine.replay.records import Records
from kernelcraft.engine.wire.protocol import Outputs

KEPT = {
    "seq": [{"tensor": {"dtype": "float32", "shape": [4], "exact_type": True, "device": "cpu", "blob": 2}}],
    "tuple": False,
}


def _out(read: int) -> Outputs:
    program = {"inputs": [], "storages": [], "steps": [{"read": read}], "kernels": [], "outputs": []}
    return Outputs(outputs=[], inputs_after=[], kernels=[], program=program, program_kept=KEPT)


def test_records_are_kept_once_each_holding_only_the_kept_bytes_shared_across_records() -> None:
    records = Records()
    weights = b"w" * 16
    records.add(_out(1), [b"output", b"inputs", weights], 0, 0, None, False)
    records.add(_out(1), [b"output2", b"inputs2", bytes(weights)], 1, 0, 2.0**-10, False)  # the same
    records.add(_out(2), [b"output3", b"inputs3", bytes(weights)], 2, 0, None, False)  # another read
    records.add(_out(3), [b"o", b"i", bytes(weights)], 3, 0, None, True)
    records.add(_out(4), [b"o", b"i", bytes(weights)], 4, 0, None, True)
    assert [r.trial for r in records.distinct] == [0, 2, 3, 4]
    assert all(r.blobs == [weights] for r in records.distinct)
    assert records.distinct[0].out.program_kept["seq"][0]["tensor"]["blob"] == 0
    assert records.distinct[0].blobs[0] is records.distinct[1].blobs[0]  # one copy of the weights
    rerun = records.to_rerun()
    assert [r.trial for r in rerun][:2] == [0, 2] and len(rerun) == 3 and rerun[2].config
