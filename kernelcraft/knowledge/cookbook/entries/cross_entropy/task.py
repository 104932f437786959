"""Cross-entropy loss over class logits, mean over the batch (modelled on KernelBench level 1,
95_CrossEntropyLoss)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.nn.functional.cross_entropy(predictions, targets)


batch_size = 50
num_classes = 1000


def get_inputs():
    return [torch.rand(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_input_sets():
    # more classes than one block (the online path), with large logits
    return [[torch.randn(9, 10000) * 30, torch.randint(0, 10000, (9,))]]


def get_init_inputs():
    return []
