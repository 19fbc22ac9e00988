"""A same-size Transformer baseline for the speed benchmarks: what a user would train instead of our model.

Pre-norm decoder (RMSNorm), causal self-attention through `F.scaled_dot_product_attention` (flash attention on an
H100/H200), rotary position embeddings, a SwiGLU feed-forward, tied embeddings, no biases. `ffn_dim=3072` at
d_model 1024 and 28 layers makes it 434M parameters with a 50,304-row embedding, the size of our default model.
The forward takes `targets` and returns the mean cross-entropy, like ours.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


def rope_tables(T: int, head_dim: int, device, base: float = 10000.0):
    "cos, sin (T, head_dim/2) of the rotary angles t * base^(-2i/head_dim)."
    inv = base ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    ang = torch.arange(T, device=device, dtype=torch.float32)[:, None] * inv[None]
    return ang.cos(), ang.sin()


def rotate(x, cos, sin):
    "x (B, nh, T, hd): pairs (2i, 2i+1) rotated by the table's angles."
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2).type_as(x)


class Block(nn.Module):
    def __init__(self, d: int, n_heads: int, ffn: int):
        super().__init__()
        self.n_heads = n_heads
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.w1, self.w3, self.w2 = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False), nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(rotate(q, cos, sin), rotate(k, cos, sin), v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, d))
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class TransformerLM(nn.Module):
    def __init__(self, vocab_size=50304, d_model=1024, n_layers=28, n_heads=16, ffn_dim=3072, real_vocab=50257):
        super().__init__()
        self.real_vocab = real_vocab
        self.embed = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(Block(d_model, n_heads, ffn_dim) for _ in range(n_layers))
        self.norm_f = nn.RMSNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.embed.weight
        for n, p in self.named_parameters():
            if p.dim() == 2: nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layers) if n.endswith(("proj.weight", "w2.weight")) else 0.02)
        self.head_dim = d_model // n_heads

    def forward(self, idx, targets=None):
        B, T = idx.shape
        cos, sin = rope_tables(T, self.head_dim, idx.device)
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.norm_f(x))[..., :self.real_vocab].float()
        if targets is None: return logits
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
