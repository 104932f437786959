"""Hostile candidate: it finds its channel to the parent (a socket among its descriptors) and
writes a frame of its own, a "progress" message that says 7 GiB of blobs follow, then streams
them. The parent must refuse the frame on its header, read none of it, and give a verdict."""

import os
import stat
import struct

import torch
import torch.nn as nn

KIND = "progress"
BLOB = 7 * 1024**3


def _channel():
    for fd in range(3, 256):  # (its box does not let it list /proc/self/fd)
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                return fd
        except OSError:
            pass
    return None


class ModelNew(nn.Module):
    def forward(self, x):
        fd = _channel()
        if fd is not None:
            header = ('{"type": "%s", "message": "x", "blobs": [%d]}' % (KIND, BLOB)).encode()
            os.write(fd, struct.pack("<Q", len(header)) + header)
            chunk = bytes(1024 * 1024)
            for _ in range(BLOB // len(chunk)):
                os.write(fd, chunk)
        return torch.relu(x) * 2.0 + 1.0
