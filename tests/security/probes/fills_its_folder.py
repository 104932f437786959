"""Hostile candidate: it fills its own directory (the work folder on the server's disk) with a
file as large as it can write. The folder is a sized tmpfs: the write stops at its size, and
nothing reaches the disk. It reports what it saw in its error text."""

import os

import torch.nn as nn

CHUNK = 64 * 1024 * 1024
TOTAL = 3 * 1024**3


class ModelNew(nn.Module):
    def forward(self, x):
        st = os.statvfs(".")
        written, error = 0, None
        try:
            with open("filler.bin", "wb") as f:
                block = b"\0" * CHUNK
                while written < TOTAL:
                    f.write(block)
                    f.flush()
                    written += CHUNK
        except OSError as e:
            error = type(e).__name__
        raise RuntimeError(f"folder_bytes={st.f_blocks * st.f_frsize} written={written} error={error}")
