"""Read a llama.cpp GGUF file as a Hugging Face config, tokenizer and float32 weights.

The engine runs every model in plain torch from Hugging Face checkpoint names, so a GGUF
file is translated back into what ``convert_hf_to_gguf.py`` started from:

* ``hf_config()``: the ``LlamaConfig`` / ``Qwen2Config`` / ``Qwen3Config`` rebuilt from the
  ``{arch}.*`` metadata keys;
* ``tokenizer()``: a ``PreTrainedTokenizerFast`` rebuilt from ``tokenizer.ggml.*``, with the
  pre-tokenizer the original ``tokenizer.json`` used (chosen by ``tokenizer.ggml.pre``);
* ``iter_weights()``: every tensor dequantized to float32 under its Hugging Face name, with
  llama.cpp's rotary row permutation of q/k undone for the ``llama`` architecture.

Quantized weights are dequantized with ``gguf.quants.dequantize``: the engine gets exactly the
values llama.cpp would compute with, not the original full-precision ones.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf.quants import dequantize
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import LlamaConfig, PretrainedConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen3Config

from deepinfer.logger import init_logger

logger = init_logger(__name__)

__all__ = ["SUPPORTED_ARCHITECTURES", "GGUFCheckpoint", "hf_tensor_name", "llama3_rope_factors"]


# --------------------------------------------------------------------------------------------
# Architectures
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Architecture:
    config_class: type[PretrainedConfig]
    hf_architecture: str
    # llama.cpp's converter interleaves the rows of q_proj/k_proj for its rotary kernel, but
    # only for models it converts as "llama"; Qwen models keep the Hugging Face layout.
    permuted_qk: bool
    # Whether the config class has an ``attention_bias`` switch (Qwen2 always has biases).
    has_attention_bias_flag: bool


_ARCHITECTURES: dict[str, _Architecture] = {
    "llama": _Architecture(LlamaConfig, "LlamaForCausalLM", permuted_qk=True, has_attention_bias_flag=True),
    "qwen2": _Architecture(Qwen2Config, "Qwen2ForCausalLM", permuted_qk=False, has_attention_bias_flag=False),
    "qwen3": _Architecture(Qwen3Config, "Qwen3ForCausalLM", permuted_qk=False, has_attention_bias_flag=True),
}

SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(_ARCHITECTURES)


# --------------------------------------------------------------------------------------------
# Tensor names
# --------------------------------------------------------------------------------------------

_GLOBAL_TENSORS = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}

_BLOCK_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

# llama.cpp-only tensors with no Hugging Face parameter. rope_freqs holds Llama 3 rope scaling
# factors; hf_config() turns them back into rope_parameters instead.
_TENSORS_WITHOUT_HF_NAME = {"rope_freqs.weight"}


def hf_tensor_name(gguf_name: str) -> str | None:
    """The Hugging Face checkpoint name of a GGUF tensor, or None if Hugging Face has no such tensor."""
    base, dot, suffix = gguf_name.rpartition(".")
    if not dot or suffix not in ("weight", "bias"):
        return None
    if base in _GLOBAL_TENSORS:
        return f"{_GLOBAL_TENSORS[base]}.{suffix}"
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _BLOCK_TENSORS:
        return f"model.layers.{int(parts[1])}.{_BLOCK_TENSORS[parts[2]]}.{suffix}"
    return None


def _unpermute_rotary_rows(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation for the "llama" architecture.

    Hugging Face rotates the two halves of each head (rotate_half); llama.cpp's kernel rotates
    adjacent pairs, so its converter reorders each head's rows from [x0..x(d/2-1), y0..y(d/2-1)]
    to [x0, y0, x1, y1, ...] via ``reshape(heads, 2, d/2, ...).swapaxes(1, 2)``. The inverse
    swaps the same two axes of ``reshape(heads, d/2, 2, ...)``. Works for weights and biases.
    """
    rows = weight.shape[0]
    if rows % (2 * n_heads):
        raise ValueError(f"cannot unpermute {rows} rows into {n_heads} heads of even size")
    half = rows // n_heads // 2
    return weight.reshape(n_heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


# --------------------------------------------------------------------------------------------
# Dequantization
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _can_dequantize(qtype: GGMLQuantizationType) -> bool:
    """Whether the installed gguf package dequantizes this type (probed on one zero block)."""
    _, block_bytes = GGML_QUANT_SIZES[qtype]
    try:
        dequantize(np.zeros(block_bytes, dtype=np.uint8), qtype)
    except NotImplementedError:
        return False
    return True


def _dequantize_tensor(tensor: ReaderTensor) -> np.ndarray:
    """A GGUF tensor as a writable float32 array in numpy/torch dimension order.

    GGUF lists dimensions innermost-first (``[in_features, out_features]``); reversed, that
    is the Hugging Face ``[out_features, in_features]`` shape.
    """
    shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    values = dequantize(tensor.data, tensor.tensor_type).reshape(shape)
    if values.dtype != np.float32:
        values = values.astype(np.float32)
    if not values.flags.writeable:  # F32 tensors come back as views of the read-only memory map
        values = values.copy()
    return values


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------

# Token types in tokenizer.ggml.token_type (llama.cpp's llama_token_type).
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6

# Pre-tokenizer split patterns, as written in the models' original tokenizer.json files.
_GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# What llama.cpp itself applies when a file has no (or a "default") tokenizer.ggml.pre.
_LLAMA_CPP_DEFAULT_PATTERNS = (
    r"[\p{P}\$\+<=>\^~\|]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
)


def _byte_level(use_regex: bool) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=use_regex)


def _split_then_byte_level(*patterns: str) -> pre_tokenizers.PreTokenizer:
    splits = [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in patterns]
    return pre_tokenizers.Sequence([*splits, _byte_level(use_regex=False)])


@dataclass(frozen=True)
class _PreTokenizerFamily:
    build: Any  # () -> pre_tokenizers.PreTokenizer
    ignore_merges: bool = False  # Llama 3 looks whole pre-tokens up in the vocab before merging


_GPT2 = _PreTokenizerFamily(lambda: _byte_level(use_regex=True))
# StarCoder/SmolLM: every digit is its own pre-token (Digits(individual_digits=True)).
_DIGITS_THEN_GPT2 = _PreTokenizerFamily(
    lambda: pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), _byte_level(use_regex=True)]
    )
)
_LLAMA3 = _PreTokenizerFamily(lambda: _split_then_byte_level(_LLAMA3_PATTERN), ignore_merges=True)
_QWEN2 = _PreTokenizerFamily(lambda: _split_then_byte_level(_QWEN2_PATTERN))
_LLAMA_CPP_DEFAULT = _PreTokenizerFamily(lambda: _split_then_byte_level(*_LLAMA_CPP_DEFAULT_PATTERNS))

# tokenizer.ggml.pre values (llama.cpp's names) grouped by the pre-tokenizer they stand for.
_PRE_TOKENIZERS: dict[str, _PreTokenizerFamily] = {
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "jais"), _GPT2),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"), _DIGITS_THEN_GPT2
    ),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"), _LLAMA3),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"), _QWEN2),
    "default": _LLAMA_CPP_DEFAULT,
}


def _byte_level_bpe(tokens: list[str], merges: list[str], pre: str, source: Path) -> Tokenizer:
    """The backend of a "gpt2" (byte-level BPE) GGUF vocabulary."""
    family = _PRE_TOKENIZERS.get(pre)
    if family is None:
        raise ValueError(
            f"{source}: tokenizer.ggml.pre {pre!r} is not supported (supported: {', '.join(sorted(_PRE_TOKENIZERS))}); "
            "load the tokenizer from the original Hugging Face model instead"
        )
    vocab = {token: i for i, token in enumerate(tokens)}
    pairs = [tuple(merge.split(" ", 1)) for merge in merges]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=family.ignore_merges))
    tokenizer.pre_tokenizer = family.build()
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _merges_from_scores(tokens: list[str], scores: list[float], token_types: list[int]) -> list[tuple[str, str]]:
    """BPE merges equivalent to a SentencePiece BPE vocabulary.

    SentencePiece (and llama.cpp) repeatedly merge the adjacent pair whose concatenation has
    the highest score; a BPE model does the same if every split of a normal token into two
    vocabulary pieces is a merge, ranked by the token's score (then token id, then split point).
    """
    ids = {token: i for i, token in enumerate(tokens)}
    ranked: list[tuple[float, int, int, str, str]] = []
    for token_id, (token, score, kind) in enumerate(zip(tokens, scores, token_types)):
        if kind != _NORMAL:
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ids and right in ids:
                ranked.append((-score, token_id, cut, left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _sentencepiece_bpe(
    tokens: list[str], scores: list[float], token_types: list[int], unk_id: int | None, add_space_prefix: bool
) -> Tokenizer:
    """The backend of a "llama" (SentencePiece BPE with byte fallback) GGUF vocabulary.

    Mirrors Hugging Face's legacy Llama fast tokenizer: spaces become "▁", a "▁" is prepended
    to every text segment (llama.cpp does the same after each special token), and characters
    missing from the vocabulary fall back to <0xXX> byte tokens.
    """
    vocab = {token: i for i, token in enumerate(tokens)}
    merges = _merges_from_scores(tokens, scores, token_types)
    unk = tokens[unk_id] if unk_id is not None else None
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    steps = [normalizers.Prepend("▁")] if add_space_prefix else []
    tokenizer.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "▁")])
    decode = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_space_prefix:
        decode.append(decoders.Strip(content=" ", left=1, right=0))
    tokenizer.decoder = decoders.Sequence(decode)
    return tokenizer


def _add_vocabulary_added_tokens(tokenizer: Tokenizer, tokens: list[str], token_types: list[int]) -> None:
    """Make CONTROL/UNKNOWN tokens special and USER_DEFINED ones plain added tokens.

    Both are matched verbatim before pre-tokenization (so "<|im_start|>" is one id); only
    special ones are dropped by ``decode(..., skip_special_tokens=True)``.
    """
    special = [
        AddedToken(tokens[i], special=True, normalized=False)
        for i, kind in enumerate(token_types)
        if kind in (_CONTROL, _UNKNOWN)
    ]
    user_defined = [
        AddedToken(tokens[i], special=False, normalized=False)
        for i, kind in enumerate(token_types)
        if kind == _USER_DEFINED
    ]
    if special:
        tokenizer.add_special_tokens(special)
    if user_defined:
        tokenizer.add_tokens(user_defined)


# --------------------------------------------------------------------------------------------
# RoPE
# --------------------------------------------------------------------------------------------


def llama3_rope_factors(
    theta: float, head_dim: int, factor: float, low_freq_factor: float, high_freq_factor: float, original_context: int
) -> np.ndarray:
    """The per-frequency divisors that Llama 3 rope scaling applies (llama.cpp's rope_freqs)."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / inv_freq
    smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smooth = np.clip(smooth, 0.0, 1.0)  # 0: long wavelengths (divide by factor), 1: short ones (keep)
    return 1.0 / ((1.0 - smooth) / factor + smooth)


def _llama3_rope_parameters(factors: np.ndarray, theta: float, head_dim: int) -> dict[str, Any] | None:
    """Recover Hugging Face "llama3" rope parameters from llama.cpp's rope_freqs tensor.

    The converter bakes ``factor``, ``low_freq_factor``, ``high_freq_factor`` and
    ``original_max_position_embeddings`` into one divisor per frequency. The divisors only
    determine ``factor`` and the line ``smooth = a / wavelen + b`` between the two cut-offs, so
    the three remaining numbers are recovered up to one degree of freedom; fixing
    ``low_freq_factor = 1`` (Meta's value) gives a config with the same frequencies. With
    fewer than two frequencies between the cut-offs, Meta's published values are assumed.
    Returns None when the factors are not Llama 3 shaped.
    """
    factors = np.asarray(factors, dtype=np.float64)
    factor = float(factors.max())
    if factor <= 1.0 + 1e-6:
        return {}
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if factors.shape != inv_freq.shape:
        return None
    between = (factors > 1.0 + 1e-4) & (factors < factor * (1.0 - 1e-4))
    low_freq_factor, high_freq_factor, original_context = 1.0, 4.0, 8192
    if between.sum() >= 2:
        smooth = (1.0 / factors[between] - 1.0 / factor) / (1.0 - 1.0 / factor)
        slope, intercept = np.polyfit(inv_freq[between] / (2 * math.pi), smooth, 1)
        if intercept < 0 < slope:
            high_freq_factor = round(float(low_freq_factor - low_freq_factor / intercept), 4)
            original_context = int(round(float(slope) * (high_freq_factor - low_freq_factor)))
    params = {
        "rope_type": "llama3",
        "factor": round(factor, 4),
        "low_freq_factor": low_freq_factor,
        "high_freq_factor": high_freq_factor,
        "original_max_position_embeddings": original_context,
    }
    expected = llama3_rope_factors(
        theta, head_dim, params["factor"], low_freq_factor, high_freq_factor, original_context
    )
    if not np.allclose(expected, factors, rtol=1e-3, atol=1e-4):
        return None
    return params


# --------------------------------------------------------------------------------------------
# The checkpoint
# --------------------------------------------------------------------------------------------

_MISSING: Any = object()


def _float32_value(value: float) -> float:
    """The shortest decimal that a float32 metadata value stands for.

    GGUF stores floats as float32, so 1e-5 reads back as 9.999999747378752e-06; the shortest
    decimal that rounds to the same float32 is the number the converter was given.
    """
    return float(str(np.float32(value)))


class GGUFCheckpoint:
    """A llama.cpp GGUF file seen as a Hugging Face checkpoint (config, tokenizer, weights)."""

    format = "gguf"

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"GGUF file {str(self.path)!r} does not exist")
        if not self.path.is_file():
            raise ValueError(f"{str(self.path)!r} is a directory, not a GGUF file; pass the path of the .gguf file")
        try:
            self._reader = GGUFReader(self.path)
        except Exception as exc:  # the reader raises bare ValueError/struct errors on foreign files
            raise ValueError(
                f"{str(self.path)!r} is not a readable GGUF file ({type(exc).__name__}: {exc}); "
                "pass a .gguf file written by llama.cpp's converter"
            ) from exc
        self._tensors: dict[str, ReaderTensor] = {t.name: t for t in self._reader.tensors}

        split_count = self._field("split.count", 1)
        if split_count > 1:
            raise ValueError(
                f"{self.path} is shard 1 of a {split_count}-file split GGUF; merge the shards first "
                "(llama-gguf-split --merge) and pass the merged file"
            )
        self.architecture: str = self._field("general.architecture")
        if self.architecture not in _ARCHITECTURES:
            raise ValueError(
                f"{self.path}: GGUF architecture {self.architecture!r} is not supported; "
                f"supported architectures: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        self._arch = _ARCHITECTURES[self.architecture]

    def __repr__(self) -> str:
        return f"GGUFCheckpoint({str(self.path)!r}, architecture={self.architecture!r})"

    # ---- metadata ----------------------------------------------------------------------

    def _field(self, key: str, default: Any = _MISSING) -> Any:
        field = self._reader.fields.get(key)
        if field is None:
            if default is _MISSING:
                raise ValueError(
                    f"{self.path}: required GGUF metadata key {key!r} is missing; "
                    "re-convert the model with a recent llama.cpp convert_hf_to_gguf.py"
                )
            return default
        return field.contents()

    def _arch_field(self, key: str, default: Any = _MISSING) -> Any:
        return self._field(f"{self.architecture}.{key}", default)

    def _per_model_int(self, key: str, default: Any = _MISSING) -> int:
        """An integer hyper-parameter; llama.cpp allows per-layer arrays, which must agree here."""
        value = self._arch_field(key, default)
        if isinstance(value, list):
            if len(set(value)) != 1:
                raise ValueError(f"{self.path}: per-layer {self.architecture}.{key} {value} is not supported")
            value = value[0]
        return int(value)

    def _head_dim(self, hidden_size: int, n_heads: int) -> int:
        key_length = self._arch_field("attention.key_length", None)
        if key_length is not None:
            return int(key_length)
        rope_dims = self._arch_field("rope.dimension_count", None)  # full rotary for these architectures
        if rope_dims is not None:
            return int(rope_dims)
        return hidden_size // n_heads

    def _rope_parameters(self, head_dim: int) -> dict[str, Any]:
        theta = _float32_value(self._arch_field("rope.freq_base", 10000.0))
        params: dict[str, Any] = {"rope_type": "default", "rope_theta": theta}
        scaling = self._arch_field("rope.scaling.type", "none")
        if scaling == "none":
            freqs = self._tensors.get("rope_freqs.weight")
            if freqs is not None:
                llama3 = _llama3_rope_parameters(_dequantize_tensor(freqs), theta, head_dim)
                if llama3 is None:
                    raise ValueError(
                        f"{self.path}: rope_freqs.weight does not follow Llama 3 rope scaling, "
                        "so it cannot be expressed as Hugging Face rope_parameters"
                    )
                params.update(llama3)
            return params
        factor = self._arch_field("rope.scaling.factor", None)
        if factor is None:
            raise ValueError(f"{self.path}: rope scaling {scaling!r} without {self.architecture}.rope.scaling.factor")
        params["factor"] = _float32_value(factor)
        if scaling == "linear":
            params["rope_type"] = "linear"
        elif scaling == "yarn":
            params["rope_type"] = "yarn"
            params["original_max_position_embeddings"] = int(self._arch_field("rope.scaling.original_context_length"))
            optional = {
                "beta_fast": "rope.scaling.yarn_beta_fast",
                "beta_slow": "rope.scaling.yarn_beta_slow",
                "attention_factor": "rope.scaling.yarn_attn_factor",
            }
            for hf_key, gguf_key in optional.items():
                value = self._arch_field(gguf_key, None)
                if value is not None:
                    params[hf_key] = _float32_value(value)
        else:
            raise ValueError(
                f"{self.path}: rope scaling type {scaling!r} is not supported (supported: none, linear, yarn, "
                "and Llama 3 scaling stored as rope_freqs.weight)"
            )
        return params

    def hf_config(self) -> PretrainedConfig:
        """The Hugging Face config the file was converted from (no quantization_config: weights come dequantized)."""
        hidden_size = self._per_model_int("embedding_length")
        n_heads = self._per_model_int("attention.head_count")
        head_dim = self._head_dim(hidden_size, n_heads)
        kwargs: dict[str, Any] = {
            "architectures": [self._arch.hf_architecture],
            "vocab_size": self._vocab_size(),
            "hidden_size": hidden_size,
            "intermediate_size": self._per_model_int("feed_forward_length"),
            "num_hidden_layers": self._per_model_int("block_count"),
            "num_attention_heads": n_heads,
            "num_key_value_heads": self._per_model_int("attention.head_count_kv", n_heads),
            "head_dim": head_dim,
            "rms_norm_eps": _float32_value(self._arch_field("attention.layer_norm_rms_epsilon")),
            "rope_parameters": self._rope_parameters(head_dim),
            "max_position_embeddings": self._per_model_int("context_length"),
            # The converter writes output.weight only when lm_head is not tied to the embeddings.
            "tie_word_embeddings": "output.weight" not in self._tensors,
            "bos_token_id": self._field("tokenizer.ggml.bos_token_id", None),
            "eos_token_id": self._field("tokenizer.ggml.eos_token_id", None),
            "pad_token_id": self._field("tokenizer.ggml.padding_token_id", None),
        }
        if self._arch.has_attention_bias_flag:
            kwargs["attention_bias"] = "blk.0.attn_q.bias" in self._tensors
        return self._arch.config_class(**kwargs)

    def eos_token_ids(self) -> set[int]:
        eos = self._field("tokenizer.ggml.eos_token_id", None)
        return set() if eos is None else {int(eos)}

    def _vocab_size(self) -> int:
        size = self._arch_field("vocab_size", None)
        if size is not None:
            return int(size)
        embedding = self._tensors.get("token_embd.weight")
        if embedding is not None:  # GGUF shape is [hidden, vocab]
            return int(embedding.shape[-1])
        return len(self._field("tokenizer.ggml.tokens"))

    # ---- tokenizer ---------------------------------------------------------------------

    def tokenizer(self) -> PreTrainedTokenizerFast:
        """The tokenizer, built directly as a ``tokenizers.Tokenizer`` from the vocabulary in the file."""
        model = self._field("tokenizer.ggml.model")
        tokens: list[str] = self._field("tokenizer.ggml.tokens")
        token_types: list[int] = self._field("tokenizer.ggml.token_type", None) or [_NORMAL] * len(tokens)
        unk_id = self._field("tokenizer.ggml.unknown_token_id", None)
        if model == "gpt2":
            pre = self._field("tokenizer.ggml.pre", "default")
            if pre == "default":
                logger.warning("%s has no tokenizer.ggml.pre; using llama.cpp's default pre-tokenizer", self.path)
            backend = _byte_level_bpe(tokens, self._field("tokenizer.ggml.merges"), pre, self.path)
            add_bos_default = _PRE_TOKENIZERS.get(pre) is _LLAMA3
        elif model == "llama":
            scores = self._field("tokenizer.ggml.scores", None) or [0.0] * len(tokens)
            add_space_prefix = bool(self._field("tokenizer.ggml.add_space_prefix", True))
            backend = _sentencepiece_bpe(tokens, scores, token_types, unk_id, add_space_prefix)
            add_bos_default = True
        else:
            raise ValueError(
                f"{self.path}: tokenizer model {model!r} is not supported (supported: gpt2, llama); "
                "load the tokenizer from the original Hugging Face model instead"
            )
        _add_vocabulary_added_tokens(backend, tokens, token_types)

        def token(key: str) -> str | None:
            token_id = self._field(f"tokenizer.ggml.{key}", None)
            return tokens[token_id] if token_id is not None and 0 <= token_id < len(tokens) else None

        context_length = self._arch_field("context_length", None)
        return PreTrainedTokenizerFast(
            tokenizer_object=backend,
            bos_token=token("bos_token_id"),
            eos_token=token("eos_token_id"),
            unk_token=token("unknown_token_id"),
            pad_token=token("padding_token_id"),
            add_bos_token=bool(self._field("tokenizer.ggml.add_bos_token", add_bos_default)),
            add_eos_token=bool(self._field("tokenizer.ggml.add_eos_token", False)),
            chat_template=self._field("tokenizer.chat_template", None),
            model_max_length=int(context_length) if context_length is not None else int(1e30),
            clean_up_tokenization_spaces=False,
        )

    # ---- weights -----------------------------------------------------------------------

    def _check_tensor_types(self) -> None:
        """Fail before any weight is produced if one tensor cannot be dequantized."""
        for tensor in self._reader.tensors:
            if hf_tensor_name(tensor.name) is not None and not _can_dequantize(tensor.tensor_type):
                raise ValueError(
                    f"{self.path}: tensor {tensor.name!r} has GGML type {tensor.tensor_type.name}, which "
                    f"gguf {importlib.metadata.version('gguf')} cannot dequantize; re-quantize the model to a "
                    "supported type (e.g. Q8_0, Q4_K_M) or upgrade the gguf package"
                )

    def iter_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(hf_name, float32 tensor)`` for every tensor Hugging Face has, in file order.

        Tensors are dequantized lazily, one per step, from the memory-mapped file, so a caller
        that copies each into its model holds only one extra float32 tensor at a time.
        """
        self._check_tensor_types()
        n_heads = self._per_model_int("attention.head_count")
        n_kv_heads = self._per_model_int("attention.head_count_kv", n_heads)
        for tensor in self._reader.tensors:
            name = hf_tensor_name(tensor.name)
            if name is None:
                if tensor.name not in _TENSORS_WITHOUT_HF_NAME:
                    logger.warning(
                        "%s: skipping tensor %r, which has no Hugging Face equivalent", self.path, tensor.name
                    )
                continue
            values = _dequantize_tensor(tensor)
            if self._arch.permuted_qk:
                if ".self_attn.q_proj." in name:
                    values = _unpermute_rotary_rows(values, n_heads)
                elif ".self_attn.k_proj." in name:
                    values = _unpermute_rotary_rows(values, n_kv_heads)
            yield name, torch.from_numpy(np.ascontiguousarray(values))
