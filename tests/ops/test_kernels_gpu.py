"""Every Triton kernel against its torch reference on a CUDA device, at model-like shapes in bf16
(skipped without CUDA; the CPU interpreter tests cover the same kernels on tiny shapes)."""

from __future__ import annotations

import importlib

import pytest
import torch

pytestmark = pytest.mark.gpu


def pair(name: str, module: str | None = None):
    module = module or name
    ref = getattr(importlib.import_module(f"deepinfer.ops.{module}"), f"{name}_ref")
    kernel = getattr(importlib.import_module(f"deepinfer.ops.triton.{module}"), name)
    return kernel, ref


def close(a, b, tol=2e-2):
    torch.testing.assert_close(a.float(), b.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("n, k", [(6144, 4096), (4096, 14336), (128256, 4096)])
def test_gemv_bf16(n, k):
    kernel, ref = pair("gemv")
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    close(kernel(x, w, b), ref(x, w, b))


def test_quantize_fp8_per_token_bf16():
    kernel, ref = pair("quantize_fp8_per_token", "quantize_fp8")
    x = torch.randn(300, 14336, device="cuda", dtype=torch.bfloat16) * torch.logspace(-3, 2, 300, device="cuda")[:, None]
    (q, scale), (q_ref, scale_ref) = kernel(x), ref(x)
    torch.testing.assert_close(scale, scale_ref, rtol=1e-6, atol=0)
    assert (q.float() != q_ref.float()).float().mean() < 1e-4, "the hardware cast rounds like torch's"


def test_elementwise_ops_bf16():
    dev, bf16 = "cuda", torch.bfloat16
    x = torch.randn(300, 4096, device=dev, dtype=bf16)
    r = torch.randn_like(x)
    w = torch.randn(4096, device=dev, dtype=bf16)
    k, ref = pair("rms_norm")
    got, want = k(x, w, 1e-5, r), ref(x, w, 1e-5, r)
    close(got[0], want[0])
    assert torch.equal(got[1], want[1])
    k, ref = pair("silu_and_mul")
    g = torch.randn(300, 2 * 14336, device=dev, dtype=bf16)
    close(k(g), ref(g))
    k, ref = pair("rotary_embedding")
    qk = torch.randn(300, 40, 128, device=dev, dtype=bf16)
    pos = torch.randint(0, 4096, (300,), device=dev)
    freqs = torch.arange(4096, device=dev).float()[:, None] * torch.rand(64, device=dev)[None]
    cos_sin = torch.cat((freqs.cos(), freqs.sin()), -1)
    close(k(qk, pos, cos_sin, True), ref(qk, pos, cos_sin, True), 1e-2)
    k, ref = pair("write_kv_cache")
    cache_a = torch.zeros(2, 64, 16, 8, 128, device=dev, dtype=bf16)
    cache_b = cache_a.clone()
    key, value = torch.randn(50, 8, 128, device=dev, dtype=bf16), torch.randn(50, 8, 128, device=dev, dtype=bf16)
    slots = torch.randperm(64 * 16, device=dev)[:50]
    slots[3] = -1
    k(key, value, cache_a, slots)
    ref(key, value, cache_b, slots)
    assert torch.equal(cache_a, cache_b)
    fp8 = torch.float8_e4m3fn
    cache_a, cache_b = (torch.zeros(2, 64, 16, 8, 128, device=dev, dtype=fp8) for _ in range(2))
    key[0, 0, :4] = torch.tensor([1000.0, -1000.0, 448.0, 0.001])  # saturation and a subnormal
    k(key, value, cache_a, slots)
    ref(key, value, cache_b, slots)
    assert torch.equal(cache_a.view(torch.uint8), cache_b.view(torch.uint8)), "the same e4m3 bits as torch's cast"


def _paged_setup(lens, heads=32, kv_heads=8, head_dim=128, block_size=16, dtype=torch.bfloat16):
    dev = "cuda"
    blocks_needed = [-(-n // block_size) for n in lens]
    num_blocks = sum(blocks_needed) + 1
    cache = torch.randn(2, num_blocks, block_size, kv_heads, head_dim, device=dev, dtype=dtype)
    perm = (torch.randperm(num_blocks - 1) + 1).tolist()
    width = max(blocks_needed)
    tables = torch.zeros(len(lens), width, dtype=torch.int32)
    for i, nb in enumerate(blocks_needed):
        tables[i, :nb] = torch.tensor([perm.pop() for _ in range(nb)])
    return cache, tables.to(dev), torch.tensor(lens, dtype=torch.int32, device=dev)


@pytest.mark.parametrize("window", [None, 300])
def test_paged_decode_attention_bf16(window):
    kernel, ref = pair("paged_decode_attention", "paged_attention")
    lens = [1, 17, 255, 256, 257, 1000, 4000, 0]
    cache, tables, seq_lens = _paged_setup(lens)
    q = torch.randn(len(lens), 32, 128, device="cuda", dtype=torch.bfloat16)
    got = kernel(q, cache, tables, seq_lens, 128 ** -0.5, window)
    close(got, ref(q, cache, tables, seq_lens, 128 ** -0.5, window))
    assert torch.count_nonzero(got[-1]) == 0


def test_paged_prefill_attention_bf16():
    kernel, ref = pair("paged_prefill_attention", "paged_attention")
    lens, qlens = [700, 128, 2000, 1], [700, 64, 300, 1]
    cache, tables, seq_lens = _paged_setup(lens)
    qsl = torch.tensor([0] + list(torch.tensor(qlens).cumsum(0)), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(qlens), 32, 128, device="cuda", dtype=torch.bfloat16)
    close(kernel(q, cache, tables, qsl, seq_lens, max(qlens), 128 ** -0.5, None),
          ref(q, cache, tables, qsl, seq_lens, max(qlens), 128 ** -0.5, None))
