"""The Llama family: Llama (incl. Llama-3 rope scaling), Mistral, Qwen2 (qkv bias), Qwen3 (q/k norm).

These differ only in a few switches read from the Hugging Face config, so one module serves
all four; ``LlamaArch`` is the parsed, validated form of the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import torch
from torch import nn

from deepinfer.layers.activation import SiluAndMul
from deepinfer.layers.attention import Attention, AttentionMetadata
from deepinfer.layers.embedding import LMHead, VocabEmbedding
from deepinfer.layers.linear import Linear
from deepinfer.layers.norm import RMSNorm
from deepinfer.layers.rotary import RopeSpec, RotaryEmbedding
from deepinfer.models.weights import WeightLoader, fp8_block_size


@dataclass(frozen=True)
class LlamaArch:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: RopeSpec
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    sliding_windows: tuple[int | None, ...]
    """Per layer: the sliding window, or None for full attention."""

    @classmethod
    def from_hf_config(cls, config: Any) -> "LlamaArch":
        arch = (getattr(config, "architectures", None) or [""])[0]
        act = getattr(config, "hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"{arch}: hidden_act {act!r} is not supported (only silu)")
        num_heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // num_heads
        is_qwen2 = arch == "Qwen2ForCausalLM"
        attention_bias = bool(getattr(config, "attention_bias", False))
        return cls(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            num_layers=config.num_hidden_layers,
            num_heads=num_heads,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or num_heads,
            head_dim=head_dim,
            rms_norm_eps=config.rms_norm_eps,
            rope=RopeSpec.from_hf_config(config, head_dim),
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            qkv_bias=is_qwen2 or attention_bias,
            o_bias=attention_bias and not is_qwen2,
            mlp_bias=bool(getattr(config, "mlp_bias", False)),
            qk_norm=arch == "Qwen3ForCausalLM",
            sliding_windows=_sliding_windows(config),
        )


def _sliding_windows(config: Any) -> tuple[int | None, ...]:
    window = getattr(config, "sliding_window", None)
    n = config.num_hidden_layers
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return tuple(window if t == "sliding_attention" else None for t in layer_types)
    return (window,) * n


class LlamaAttention(nn.Module):
    def __init__(self, arch: LlamaArch, layer_idx: int, rotary: RotaryEmbedding, dtype: torch.dtype) -> None:
        super().__init__()
        h, d = arch.num_heads, arch.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = h, arch.num_kv_heads, d
        self.qkv_proj = Linear(arch.hidden_size, [h * d, arch.num_kv_heads * d, arch.num_kv_heads * d],
                               bias=arch.qkv_bias, dtype=dtype)
        self.o_proj = Linear(h * d, arch.hidden_size, bias=arch.o_bias, dtype=dtype)
        self.q_norm = RMSNorm(d, arch.rms_norm_eps, dtype) if arch.qk_norm else None
        self.k_norm = RMSNorm(d, arch.rms_norm_eps, dtype) if arch.qk_norm else None
        self.rotary = rotary
        self.attn = Attention(h, arch.num_kv_heads, d, scale=d**-0.5, kv_cache_index=layer_idx,
                              sliding_window=arch.sliding_windows[layer_idx])

    def forward(self, positions: torch.Tensor, x: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        t, h, hk = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = self.qkv_proj(x).view(t, h + 2 * hk, self.head_dim)
        if self.q_norm is None:
            qk = self.rotary(positions, qkv[:, : h + hk])  # q and k heads rotated in one pass
        else:
            qk = self.rotary(positions, torch.cat((self.q_norm(qkv[:, :h]), self.k_norm(qkv[:, h : h + hk])), 1))
        q, k = qk.split((h, hk), dim=1)
        o = self.attn(q, k, qkv[:, h + hk :], metadata)
        return self.o_proj(o.reshape(t, h * self.head_dim))


class LlamaMLP(nn.Module):
    def __init__(self, arch: LlamaArch, dtype: torch.dtype) -> None:
        super().__init__()
        self.gate_up_proj = Linear(arch.hidden_size, [arch.intermediate_size] * 2, bias=arch.mlp_bias, dtype=dtype)
        self.down_proj = Linear(arch.intermediate_size, arch.hidden_size, bias=arch.mlp_bias, dtype=dtype)
        self.act = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_up_proj(x)))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, arch: LlamaArch, layer_idx: int, rotary: RotaryEmbedding, dtype: torch.dtype) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(arch, layer_idx, rotary, dtype)
        self.mlp = LlamaMLP(arch, dtype)
        self.input_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps, dtype)
        self.post_attention_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps, dtype)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor, residual: torch.Tensor | None,
                metadata: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden, metadata)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class LlamaForCausalLM(nn.Module):
    # checkpoint name piece -> (our module name piece, shard index in the fused layer)
    fused_modules = {
        "q_proj": ("qkv_proj", 0),
        "k_proj": ("qkv_proj", 1),
        "v_proj": ("qkv_proj", 2),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }

    def __init__(self, hf_config: Any, dtype: torch.dtype) -> None:
        super().__init__()
        self.arch = arch = LlamaArch.from_hf_config(hf_config)
        self.fp8_block = fp8_block_size(hf_config)
        self.embed_tokens = VocabEmbedding(arch.vocab_size, arch.hidden_size, dtype)
        self.rotary = RotaryEmbedding(arch.rope)
        self.layers = nn.ModuleList(LlamaDecoderLayer(arch, i, self.rotary, dtype) for i in range(arch.num_layers))
        self.norm = RMSNorm(arch.hidden_size, arch.rms_norm_eps, dtype)
        self.lm_head = LMHead(arch.vocab_size, arch.hidden_size, dtype,
                              tied_to=self.embed_tokens if arch.tie_word_embeddings else None)

    @property
    def num_kv_caches(self) -> int:
        return self.arch.num_layers

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, residual, metadata)
        hidden, _ = self.norm(hidden, residual)
        return hidden

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        loader = WeightLoader(self, fused_modules=self.fused_modules, prefix_map={"model.": ""},
                              ignored=("rotary_emb.inv_freq",), fp8_block=self.fp8_block)
        if self.arch.tie_word_embeddings:
            loader.ignore("lm_head.weight")  # the embedding is the head
        loader.load(weights)
