"""A BERT-like stack of tiny layers (hidden 32, 12 tokens): every kernel is a few hundred elements, so a
call's time is the host program's own. Shared by bench/host_percall.py, bench/gpu_percall_probe.py and
tests/cuda/test_host_path_cuda.py."""
from __future__ import annotations

import torch


class TinyLayer(torch.nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(hidden, hidden) for _ in range(4))
        self.up, self.down = torch.nn.Linear(hidden, 4 * hidden), torch.nn.Linear(4 * hidden, hidden)
        self.norm1, self.norm2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)

    def forward(self, x):
        b, t, h = x.shape

        def split(y):
            return y.view(b, t, self.heads, h // self.heads).transpose(1, 2)
        att = torch.nn.functional.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)))
        x = self.norm1(x + self.o(att.transpose(1, 2).reshape(b, t, h)))
        return self.norm2(x + self.down(torch.nn.functional.gelu(self.up(x))))


def tiny_stack(layers: int, hidden: int = 32, heads: int = 2) -> torch.nn.Module:
    return torch.nn.Sequential(*(TinyLayer(hidden, heads) for _ in range(layers))).eval()
