"""The engine on a CUDA device (skipped without one): same tokens as transformers, KV sizing,
seeded sampling. Run on the GPU machine with ``pytest -m gpu``."""

from __future__ import annotations

import pytest
import torch
import transformers

from deepinfer import LLM, SamplingParams

pytestmark = pytest.mark.gpu

NEW_TOKENS = 24


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    base = torch.randint(3, 384, (60,), generator=g).tolist()
    return [torch.randint(3, 384, (n,), generator=g).tolist() for n in (3, 11, 29, 47)] + [base, base[:44] + [5, 6]]


def hf_greedy(path: str, dtype: torch.dtype) -> list[list[int]]:
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype).cuda().eval()
    out = []
    for p in prompts():
        ids = model.generate(torch.tensor([p], device="cuda"), max_new_tokens=NEW_TOKENS, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
        out.append(ids[0, len(p):].tolist())
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("engine_args", [{}, {"num_kv_blocks": 10, "max_num_batched_tokens": 16, "max_num_seqs": 3}],
                         ids=["default", "preempt_chunk"])
def test_cuda_greedy_equals_transformers_fp32(arch, engine_args, tiny_checkpoints):
    llm = LLM(tiny_checkpoints[arch], device="cuda", dtype="float32", max_model_len=128, **engine_args)
    assert llm.engine.device.type == "cuda"
    outs = llm.generate(prompts(), SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True),
                        use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == hf_greedy(tiny_checkpoints[arch], torch.float32)


def test_cuda_bf16_agrees_with_cpu_reference(tiny_checkpoints):
    path = tiny_checkpoints["llama"]
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    gpu = LLM(path, device="cuda", dtype="bfloat16", max_model_len=128).generate(prompts(), params, use_tqdm=False)
    cpu = LLM(path, device="cpu", dtype="float32", max_model_len=128).generate(prompts(), params, use_tqdm=False)
    first = [(g.outputs[0].token_ids[0], c.outputs[0].token_ids[0]) for g, c in zip(gpu, cpu)]
    assert all(a == b for a, b in first), f"first greedy token differs between bf16 GPU and fp32 CPU: {first}"


def test_cuda_kv_cache_fills_the_memory_fraction(tiny_llama):
    total = torch.cuda.get_device_properties(0).total_memory
    llm = LLM(tiny_llama, device="cuda", gpu_memory_utilization=0.05, max_model_len=128)
    kv_bytes = llm.engine.worker.cache_engine.kv_caches[0].numel() * 4 * len(llm.engine.worker.cache_engine.kv_caches)
    assert 0.02 * total < kv_bytes <= 0.05 * total


def test_cuda_seeded_sampling_is_batch_invariant(tiny_llama):
    llm = LLM(tiny_llama, device="cuda", max_model_len=128)
    params = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=16, seed=11)
    alone = llm.generate([prompts()[2]], params, use_tqdm=False)[0].outputs[0].token_ids
    mixed = llm.generate(prompts(), [SamplingParams(temperature=1.0, max_tokens=20)] * 2 + [params]
                         + [SamplingParams(temperature=1.0, max_tokens=20)] * 3, use_tqdm=False)
    assert mixed[2].outputs[0].token_ids == alone


@pytest.mark.parametrize("batch", [1, 3, 5, 17])
def test_cuda_graphs_give_the_same_tokens_as_eager(batch, tiny_checkpoints):
    """Decode steps replayed from CUDA graphs (padded up to their bucket) equal eager execution
    (float32: a padded batch may get another GEMM kernel, whose bf16 rounding could differ)."""
    path = tiny_checkpoints["qwen3"]
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    batch_prompts = (prompts() * 4)[:batch]
    # Two engines live at once: each takes a small fixed KV cache instead of 90% of the device.
    small = dict(max_model_len=128, num_kv_blocks=256, max_num_seqs=32)
    graphed = LLM(path, device="cuda", dtype="float32", **small)
    assert graphed.engine.worker.runner.graph_runner is not None
    eager = LLM(path, device="cuda", dtype="float32", enforce_eager=True, **small)
    assert eager.engine.worker.runner.graph_runner is None
    a = [o.outputs[0].token_ids for o in graphed.generate(batch_prompts, params, use_tqdm=False)]
    b = [o.outputs[0].token_ids for o in eager.generate(batch_prompts, params, use_tqdm=False)]
    assert a == b


def test_cuda_fp8_weights_run_and_track_bf16(tiny_checkpoints):
    """FP8 (3 mantissa bits) moves this tiny model's large logits by up to ~0.7 nats (seen on the
    H200); a wrong scale or weight layout would move them by many."""
    path = tiny_checkpoints["llama"]
    params = SamplingParams(temperature=0, max_tokens=1, logprobs=3)
    small = dict(max_model_len=128, num_kv_blocks=256, max_num_seqs=32)  # two engines live at once
    ref = LLM(path, device="cuda", dtype="bfloat16", **small).generate(prompts(), params, use_tqdm=False)
    fp8 = LLM(path, device="cuda", dtype="bfloat16", quantization="fp8", **small)
    got = fp8.generate(prompts(), params, use_tqdm=False)
    for a, b in zip(got, ref):
        for token, lp in b.outputs[0].logprobs[0].items():
            if token in a.outputs[0].logprobs[0]:
                assert abs(a.outputs[0].logprobs[0][token].logprob - lp.logprob) < 1.0
    long = fp8.generate(prompts(), SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True),
                        use_tqdm=False)
    assert all(len(o.outputs[0].token_ids) == NEW_TOKENS for o in long)


def test_launching_a_step_never_waits_for_the_device(tiny_checkpoints):
    """Zero-overhead scheduling needs a launch path with no host-device sync: scheduling, input
    preparation, the forward pass (eager prefill and graph decode) and the sampler (penalties,
    top-k/p, min-p, logprobs, seeded draws) run under torch's sync debug mode set to raise; only
    reading the sampled ids back (outside the check) may wait."""
    llm = LLM(tiny_checkpoints["llama"], max_model_len=128, num_kv_blocks=256, max_num_seqs=8)
    worker = llm.engine.worker
    launch = worker.execute_model
    warm = SamplingParams(temperature=0.8, top_k=20, max_tokens=4, seed=1, logprobs=2)
    llm.generate(prompts()[:2], warm, use_tqdm=False)  # compile kernels before checking

    def checked(scheduled):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return launch(scheduled)
        finally:
            torch.cuda.set_sync_debug_mode(0)

    worker.execute_model = checked
    params = [SamplingParams(temperature=0, max_tokens=12),
              SamplingParams(temperature=0.9, top_p=0.9, max_tokens=12, seed=3, logprobs=3),
              SamplingParams(temperature=1.1, min_p=0.05, repetition_penalty=1.2, frequency_penalty=0.3,
                             max_tokens=12, seed=4),
              SamplingParams(temperature=0.7, top_k=10, presence_penalty=0.5, min_tokens=5, max_tokens=12, seed=5)]
    outs = llm.generate(prompts()[:4], params, use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [12, 12, 12, 12]


def test_batch_invariant_mode_on_gpu(tiny_checkpoints):
    """Bitwise-identical logprobs for a prompt alone and inside batches (CUDA graphs on)."""
    llm = LLM(tiny_checkpoints["llama"], max_model_len=128, num_kv_blocks=256, max_num_seqs=8, batch_invariant=True,
              dtype="bfloat16", max_num_batched_tokens=16)
    params = SamplingParams(temperature=0, max_tokens=16, logprobs=5)
    ps = prompts()[:4]
    alone = [llm.generate([p], params, use_tqdm=False)[0] for p in ps]
    together = llm.generate(ps[::-1] + ps[:2], params, use_tqdm=False)[:4][::-1]
    for a, t in zip(alone, together):
        assert a.outputs[0].token_ids == t.outputs[0].token_ids
        assert [{k: v.logprob for k, v in d.items()} for d in a.outputs[0].logprobs] == \
               [{k: v.logprob for k, v in d.items()} for d in t.outputs[0].logprobs]


def test_async_scheduling_on_and_off_give_the_same_tokens(tiny_checkpoints):
    """Zero-overhead scheduling on the GPU (CUDA graphs, in-flight tokens fed back on the
    device): greedy and seeded outputs equal to the synchronous loop, with stop tokens, penalties
    and preemption (a small KV pool)."""
    runs = {}
    for mode in (False, True):
        llm = LLM(tiny_checkpoints["llama"], max_model_len=128, num_kv_blocks=24, max_num_seqs=4,
                  max_num_batched_tokens=32, async_scheduling=mode)
        params = [SamplingParams(temperature=0, max_tokens=20),
                  SamplingParams(temperature=0.9, top_p=0.9, max_tokens=20, seed=3),
                  SamplingParams(temperature=1.0, repetition_penalty=1.3, max_tokens=20, seed=4),
                  SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[7, 11, 13])]
        ps = prompts()
        outs = llm.generate(ps, [params[i % len(params)] for i in range(len(ps))], use_tqdm=False)
        runs[mode] = [o.outputs[0].token_ids for o in outs]
        del llm
        torch.cuda.empty_cache()
    assert runs[False] == runs[True]
