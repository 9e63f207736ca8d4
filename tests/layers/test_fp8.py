"""FP8 weights: quantization accuracy, the scaled-mm linear, block-scaled checkpoints, quantize-on-load."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from deepinfer import LLM, SamplingParams
from deepinfer.layers.quantization.fp8 import (
    FP8_DTYPE, FP8RowwiseLinearMethod, dequantize_blocks, quantize_rowwise,
)
from deepinfer.ops import quantize_fp8_per_token


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_rowwise_quantization_keeps_each_row_within_e4m3_precision():
    w = torch.randn(64, 256) * torch.logspace(-3, 1, 64)[:, None]  # rows of very different scale
    q, scale = quantize_rowwise(w)
    assert q.dtype == FP8_DTYPE and scale.shape == (64, 1)
    back = q.float() * scale
    row_err = ((back - w).norm(dim=1) / w.norm(dim=1))
    assert row_err.max() < 0.04  # 3 mantissa bits: about 2-3% relative error per row


def test_fp8_linear_matches_dense_within_quantization_error():
    torch.manual_seed(0)
    w, b = torch.randn(96, 128), torch.randn(96)
    x = torch.randn(5, 128)
    method = FP8RowwiseLinearMethod(w.bfloat16(), b.bfloat16())
    out = method(x.bfloat16())
    assert out.dtype == torch.bfloat16 and out.shape == (5, 96)
    assert rel_err(out, F.linear(x, w, b)) < 0.05


def test_per_token_scales_follow_each_row():
    x = torch.randn(3, 64) * torch.tensor([[1e-3], [1.0], [1e3]])
    q, scale = quantize_fp8_per_token(x)
    assert rel_err(q.float() * scale, x) < 0.04
    zero_q, zero_scale = quantize_fp8_per_token(torch.zeros(2, 8))
    assert torch.equal(zero_q.float(), torch.zeros(2, 8)) and bool((zero_scale > 0).all()), "no 0/0 on a zero row"


def test_dequantize_blocks():
    q = torch.randn(130, 260).to(FP8_DTYPE)
    scale_inv = torch.rand(2, 3) + 0.5
    w = dequantize_blocks(q, scale_inv, (128, 128))
    assert torch.equal(w[:128, :128], q[:128, :128].float() * scale_inv[0, 0])
    assert torch.equal(w[128:, 256:], q[128:, 256:].float() * scale_inv[1, 2])


def _block_quantize(w: torch.Tensor, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-style: one scale per block x block tile."""
    n, k = w.shape
    rows, cols = -(-n // block), -(-k // block)
    scale = torch.empty(rows, cols)
    q = torch.empty(n, k, dtype=FP8_DTYPE)
    for i in range(rows):
        for j in range(cols):
            tile = w[i * block:(i + 1) * block, j * block:(j + 1) * block].float()
            s = tile.abs().max().clamp(min=1e-12) / torch.finfo(FP8_DTYPE).max
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = (tile / s).to(FP8_DTYPE)
            scale[i, j] = s
    return q, scale


@pytest.fixture(scope="module")
def fp8_checkpoint(tiny_llama, tmp_path_factory):
    dst = tmp_path_factory.mktemp("fp8") / "model"
    shutil.copytree(tiny_llama, dst)
    tensors = load_file(dst / "model.safetensors")
    out = {}
    for name, t in tensors.items():
        if name.endswith("proj.weight"):
            out[name], out[name + "_scale_inv"] = _block_quantize(t)
        else:
            out[name] = t
    save_file(out, dst / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                                  "weight_block_size": [128, 128]}
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


PROMPTS = [[5, 17, 88, 23, 9, 41, 77], [300, 12, 5], list(range(40, 90))]


def first_step_logprobs(llm):
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=1, logprobs=3), use_tqdm=False)
    return [o.outputs[0].logprobs[0] for o in outs]


def test_block_scaled_fp8_checkpoint_loads_as_fp8(fp8_checkpoint, tiny_llama):
    llm = LLM(fp8_checkpoint, max_model_len=128, num_kv_blocks=64)
    assert isinstance(llm.engine.worker.model.layers[0].self_attn.qkv_proj.method, FP8RowwiseLinearMethod)
    ref = first_step_logprobs(LLM(tiny_llama, max_model_len=128, num_kv_blocks=64))
    got = first_step_logprobs(llm)
    for a, b in zip(got, ref):
        for token, lp in b.items():
            if token in a:
                assert abs(a[token].logprob - lp.logprob) < 0.5, "FP8 logprobs stay near the full-precision ones"


def test_quantize_bf16_checkpoint_on_load(tiny_llama):
    llm = LLM(tiny_llama, max_model_len=128, quantization="fp8", dtype="bfloat16", num_kv_blocks=64)
    layer = llm.engine.worker.model.layers[1].mlp.gate_up_proj
    assert isinstance(layer.method, FP8RowwiseLinearMethod)
    assert layer.weight.numel() == 0, "the bf16 copy is freed"
    assert layer.weight_bytes == layer.method.weight.numel() + 4 * layer.method.weight_scale.numel()
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    assert all(len(o.outputs[0].token_ids) == 8 for o in outs)


def test_fp8_weight_without_its_scale_is_an_error(fp8_checkpoint, tmp_path):
    dst = tmp_path / "broken"
    shutil.copytree(fp8_checkpoint, dst)
    tensors = load_file(dst / "model.safetensors")
    del tensors["model.layers.0.mlp.up_proj.weight_scale_inv"]
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="without their weight/weight_scale_inv partner"):
        LLM(str(dst), max_model_len=64)


def test_unsupported_checkpoint_quantization_is_named(tiny_llama, tmp_path):
    dst = tmp_path / "awq"
    shutil.copytree(tiny_llama, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4}
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="checkpoint quantization 'awq' is not supported"):
        LLM(str(dst), max_model_len=64)


def test_bad_quantization_argument():
    with pytest.raises(ValueError, match="quantization must be None or fp8"):
        LLM("smollm2-135m", load_format="dummy", quantization="int4")
