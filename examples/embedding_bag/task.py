"""Embedding-bag with sum pooling (KernelBench format): the lookup of recommendation models."""

import torch
import torch.nn as nn

NUM_EMBEDDINGS = 65536
DIM = 128


class Model(nn.Module):
    def __init__(self, num_embeddings: int, dim: int):
        super().__init__()
        self.bag = nn.EmbeddingBag(num_embeddings, dim, mode="sum")

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.bag(indices, offsets)


def _bags(n_bags: int, max_len: int):
    lengths = torch.randint(0, max_len + 1, (n_bags,))
    offsets = torch.zeros(n_bags, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, 0)[:-1]
    indices = torch.randint(0, NUM_EMBEDDINGS, (int(lengths.sum()),), dtype=torch.int64)
    return [indices, offsets]


def get_inputs():
    return _bags(16384, 64)


def get_cpu_inputs():
    # empty bags are allowed (their sum is zero): max_len 5 makes some likely
    return _bags(6, 5)


def get_init_inputs():
    return [NUM_EMBEDDINGS, DIM]
