"""Small ResNet-style and Transformer-style models for the distributed tests (seconds per step on 2 cores),
each with a batch maker and a loss. Defined in a user file on purpose: see README "Distributed training"
for why `torch.compile(DDP(nn.Sequential(...)))` compiles nothing under ddp_optimizer."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + x)


class TinyResNet(nn.Module):
    def __init__(self, channels: int = 8, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.blocks = nn.Sequential(ResidualBlock(channels), ResidualBlock(channels))
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x):
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(batch, seq, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dim // self.heads)
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        attention = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
        x = x + self.proj(attention.transpose(1, 2).reshape(batch, seq, dim))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, seq: int = 8, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.randn(seq, dim) * 0.1)
        self.blocks = nn.Sequential(*[TransformerBlock(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.head(self.ln(self.blocks(self.embed(tokens) + self.position[: tokens.shape[1]])))


def resnet_batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(4, 3, 12, 12, generator=g), torch.randint(0, 10, (4,), generator=g)


def transformer_batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    tokens = torch.randint(0, 64, (4, 9), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def loss_of(model, batch):
    inputs, targets = batch
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


MODELS = {"resnet": (TinyResNet, resnet_batch), "transformer": (TinyTransformer, transformer_batch)}
