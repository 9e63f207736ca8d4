"""deepinfer bench latency | throughput: end to end on a tiny model, and the arithmetic behind them."""

from __future__ import annotations

import json
import shlex

import pytest
import torch

from deepinfer.bench.datasets import load_prompts, random_prompt_ids
from deepinfer.bench.metrics import RequestTimes, StepSplit, Summary, percentile, tpot
from deepinfer.bench.model_stats import ModelStats
from deepinfer.bench.roofline import DeviceRates, decode_bound, throughput_bound
from deepinfer.engine.llm_engine import StepTimings
from deepinfer.entrypoints.cli import build_parser, main
from deepinfer.outputs import CompletionOutput, RequestMetrics, RequestOutput
from tests.tiny_models import hf_config

TOP_KEYS = {"benchmark", "command", "args", "engine_config", "engine", "environment", "workload", "metrics",
            "step_split", "roofline", "baseline", "speedup", "profile", "notes"}


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory) -> str:
    """A config-only tiny Llama (as the built-in presets are): dummy weights, no tokenizer."""
    path = tmp_path_factory.mktemp("tiny_config") / "config.json"
    hf_config("llama", architectures=["LlamaForCausalLM"]).to_json_file(path)
    return str(path)


def _ordered(summary: dict) -> bool:
    return summary["min"] <= summary["p50"] <= summary["p90"] <= summary["p99"] <= summary["max"]


# ---- end to end through the CLI ------------------------------------------------------------------
def test_latency_end_to_end_with_baseline_and_roofline(tiny_config, tmp_path, capsys):
    out = tmp_path / "lat.json"
    argv = ["bench", "latency", "--model", tiny_config, "--load-format", "dummy", "--device", "cpu",
            "--input-len", "12", "--output-len", "6", "--batch-size", "2", "--num-iters", "3",
            "--num-iters-warmup", "1", "--compare-hf", "--roofline", "--output", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "decode tok/s per sequence" in printed and "speedup" in printed and "roofline" in printed
    result = json.loads(out.read_text())
    assert set(result) == TOP_KEYS and result["benchmark"] == "latency"
    assert out.with_suffix(".png").stat().st_size > 0

    m = result["metrics"]
    assert m["batch_size"] == 2 and m["num_iters"] == 3 and len(m["iterations"]) == 3
    for key in ("e2e_s", "ttft_s", "tpot_s", "decode_tok_s_per_seq", "output_tok_s"):
        assert m[key]["count"] == 3 and m[key]["p50"] > 0 and _ordered(m[key]), key
    for it in m["iterations"]:
        assert 0 < it["ttft"] < it["e2e"]
    # every timed iteration: one prefill step and output_len - 1 decode steps
    assert result["step_split"]["steps"] == 3 * 6
    assert result["step_split"]["execute_s"] > 0
    assert result["workload"]["prompt_len"]["min"] == result["workload"]["prompt_len"]["max"] == 12
    assert result["workload"]["output_tokens"] == 3 * 2 * 6

    assert result["engine_config"]["model"]["load_format"] == "dummy"
    assert result["engine"]["max_model_len"] == 12 + 6  # sized from the prompts when not given
    env = result["environment"]
    assert {"python", "torch", "transformers", "deepinfer", "cpu", "cpu_threads", "date"} <= set(env)

    base = result["baseline"]
    assert base["model"]["source"] == "from_config" and base["batch_size"] == 2
    assert base["metrics"]["decode_tok_s_per_seq"]["p50"] > 0
    assert any("random init" in n for n in result["notes"])
    assert set(result["speedup"]) == {"e2e_latency_p50", "decode_tok_s_per_seq_p50", "ttft_p50"}
    assert all(v > 0 for v in result["speedup"].values())

    roof = result["roofline"]
    assert roof["device"]["copy_bandwidth_gb_s"] > 0 and roof["device"]["bf16_matmul_tflop_s"] > 0
    bound = roof["bound"]
    assert bound["tok_s_per_seq"] > 0 and bound["mean_context"] == 12 + (6 - 1) / 2
    assert bound["percent_of_bound"] == pytest.approx(100 * m["decode_tok_s_per_seq"]["p50"] / bound["tok_s_per_seq"])

    # The recorded command repeats the run: it parses back to the same arguments.
    assert result["command"].startswith("deepinfer bench latency ")
    again = vars(build_parser().parse_args(shlex.split(result["command"])[1:]))
    first = vars(build_parser().parse_args(argv))
    assert {k: v for k, v in again.items() if k != "bench_parser"} == {k: v for k, v in first.items()
                                                                        if k != "bench_parser"}


def test_throughput_end_to_end_on_a_checkpoint_with_baseline(tiny_llama, tmp_path, capsys):
    out = tmp_path / "tp.json"
    assert main(["bench", "throughput", "--model", tiny_llama, "--device", "cpu", "--num-prompts", "10",
                 "--input-len", "16", "--output-len", "8", "--max-num-seqs", "4", "--compare-hf",
                 "--hf-batch-size", "3", "--hf-num-prompts", "6", "--roofline", "--output", str(out)]) == 0
    assert "output tok/s" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert set(result) == TOP_KEYS and result["benchmark"] == "throughput"
    assert out.with_suffix(".png").stat().st_size > 0

    m = result["metrics"]
    assert m["num_requests"] == 10 and m["output_tokens"] == 10 * 8 and m["prompt_tokens"] == 10 * 16
    assert m["output_tok_s"] > 0 and m["total_tok_s"] > m["output_tok_s"] and m["requests_per_s"] > 0
    assert m["output_tok_s"] == pytest.approx(m["output_tokens"] / m["elapsed_s"])
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert m[key]["count"] == 10 and m[key]["p50"] > 0 and _ordered(m[key]), key
    assert m["ttft_s"]["p50"] < m["e2e_s"]["p50"]
    split = result["step_split"]
    assert split["steps"] > 0 and split["wall_s"] == pytest.approx(m["elapsed_s"])
    assert split["schedule_s"] + split["execute_s"] + split["postprocess_s"] <= split["wall_s"]

    base = result["baseline"]
    assert base["model"]["source"] == "checkpoint"
    assert base["num_requests"] == 6 and base["batch_size"] == 3 and len(base["batches"]) == 2
    assert base["output_tokens"] == 6 * 8 and base["output_tok_s"] > 0
    assert result["speedup"]["output_tok_s"] == pytest.approx(m["output_tok_s"] / base["output_tok_s"])
    assert any("first 6 of 10" in n for n in result["notes"])

    bound = result["roofline"]["bound"]
    stats = result["engine"]["model_stats"]
    assert bound["decode_batch"] == 4 and bound["limited_by"] in ("compute", "memory")
    # 10 prompts of 16, 8 outputs each: the forward passes see 16 + 7 tokens per sequence
    assert bound["linear_flops"] == 2 * stats["matmul_params"] * 10 * (16 + 7)
    assert bound["lm_head_flops"] == 2 * stats["lm_head_params"] * 10 * 8
    assert bound["output_tok_s"] > 0 and 0 < bound["percent_of_bound"] < 100


def test_chat_dataset_needs_a_tokenizer(tiny_llama, tiny_config, tmp_path, capsys):
    out = tmp_path / "chat.json"
    assert main(["bench", "throughput", "--model", tiny_llama, "--dataset", "chat", "--num-prompts", "3",
                 "--device", "cpu", "--output-len", "4", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["workload"]["dataset"] == "chat" and result["metrics"]["output_tokens"] == 12
    assert main(["bench", "throughput", "--model", tiny_config, "--load-format", "dummy", "--dataset", "chat"]) == 2
    assert "needs a tokenizer" in capsys.readouterr().err


def test_too_short_max_model_len_is_a_clear_error(tiny_config, capsys):
    assert main(["bench", "latency", "--model", tiny_config, "--load-format", "dummy", "--input-len", "40",
                 "--output-len", "30", "--max-model-len", "64"]) == 2
    assert "shorter than the longest prompt plus output_len (70)" in capsys.readouterr().err


def test_each_command_has_every_engine_flag_and_only_its_own_bench_flags():
    from deepinfer.entrypoints.cli import _ENGINE_GROUPS

    parser = build_parser()
    for command, own, foreign in (("latency", "--batch-size", "--num-prompts"),
                                  ("throughput", "--num-prompts", "--batch-size")):
        sub = parser._subparsers._group_actions[0].choices["bench"]._subparsers._group_actions[0].choices[command]
        flags = {s for a in sub._actions for s in a.option_strings}
        for cls in _ENGINE_GROUPS:
            for name in cls.__dataclass_fields__:
                assert "--" + name.replace("_", "-") in flags, (command, name)
        assert own in flags and foreign not in flags and "--compare-hf" in flags and "--roofline" in flags
        assert "--temperature" not in flags  # sampling is fixed: greedy, exactly output_len tokens
    defaults = parser.parse_args(["bench", "throughput"])
    assert (defaults.num_prompts, defaults.input_len, defaults.output_len) == (1000, 1000, 1000)
    defaults = parser.parse_args(["bench", "latency"])
    assert (defaults.batch_size, defaults.input_len, defaults.output_len) == (1, 128, 256)


# ---- prompts ---------------------------------------------------------------------------------------
def test_random_prompts_have_exact_length_and_are_reproducible():
    prompts = random_prompt_ids(20, 33, vocab_size=50, seed=7)
    assert len(prompts) == 20 and all(len(p) == 33 for p in prompts)
    assert all(0 <= t < 50 for p in prompts for t in p) and len({t for p in prompts for t in p}) > 40
    assert random_prompt_ids(20, 33, vocab_size=50, seed=7) == prompts
    assert random_prompt_ids(20, 33, vocab_size=50, seed=8) != prompts
    torch.manual_seed(123)  # independent of the global seed
    assert random_prompt_ids(20, 33, vocab_size=50, seed=7) == prompts


def test_load_prompts_reads_the_vocabulary_of_the_model(tiny_config):
    prompts = load_prompts("random", 5, 9, 0, tiny_config)
    assert [len(p) for p in prompts] == [9] * 5 and max(max(p) for p in prompts) < 384


# ---- metrics ---------------------------------------------------------------------------------------
def test_percentiles_on_hand_made_values():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0 and percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    assert percentile([5.0], 99) == 5.0
    values = [float(v) for v in range(1, 101)]
    s = Summary.of(values)
    assert (s.mean, s.p50, s.p90, s.p99, s.min, s.max, s.count) == (50.5, 50.5, pytest.approx(90.1),
                                                                     pytest.approx(99.01), 1.0, 100.0, 100)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_tpot_and_request_times_on_hand_made_outputs():
    assert tpot(first_token_time=10.0, finished_time=11.0, output_tokens=11) == pytest.approx(0.1)
    assert tpot(10.0, 10.0, 1) is None
    out = RequestOutput(request_id="0", prompt=None, prompt_token_ids=[1, 2], finished=True,
                        outputs=[CompletionOutput(0, "", [5] * 5, "length")],
                        metrics=RequestMetrics(arrival_time=100.0, first_token_time=100.5, finished_time=102.5))
    times = RequestTimes.of(out)
    assert (times.ttft, times.e2e, times.output_tokens) == (0.5, 2.5, 5)
    assert times.tpot == pytest.approx(2.0 / 4)


def test_step_split_is_the_difference_of_the_running_totals():
    before = StepTimings(steps=10, schedule=1.0, execute=5.0, postprocess=2.0)
    after = StepTimings(steps=30, schedule=1.5, execute=9.0, postprocess=3.0)
    split = StepSplit.between(before, after, wall_s=6.5)
    assert (split.steps, split.schedule_s, split.execute_s, split.postprocess_s) == (20, 0.5, 4.0, 1.0)
    assert split.other_s == pytest.approx(1.0) and split.execute_ms_per_step == pytest.approx(200.0)


# ---- roofline --------------------------------------------------------------------------------------
def _stats(**kw) -> ModelStats:
    base = dict(param_count=1000, param_bytes=2000, weight_bytes_per_token=1800, embedding_params=100,
                lm_head_params=100, matmul_params=800, kv_bytes_per_token=10, num_layers=2, num_heads=4, head_dim=8)
    return ModelStats(**{**base, **kw})


def _rates() -> DeviceRates:
    return DeviceRates(device="cpu", copy_bytes=1, copy_bandwidth_gb_s=1e-6, matmul_size=1,
                       bf16_matmul_tflop_s=1e-9, fp8_matmul_tflop_s=None, fp8_note="")


def test_decode_bound_is_bandwidth_over_weights_and_kv_read():
    bound = decode_bound(_stats(), _rates(), batch_size=2, input_len=100, output_len=21, measured_tok_s_per_seq=0.1)
    assert bound.mean_context == 110
    assert bound.bytes_per_step == 1800 + 2 * 110 * 10
    assert bound.tok_s_per_seq == pytest.approx(1000 / 4000)  # 1000 B/s over 4000 B per step
    assert bound.percent_of_bound == pytest.approx(40.0)


def test_throughput_bound_is_the_slower_of_compute_and_memory():
    rates = _rates()  # 1000 FLOP/s, 1000 B/s
    bound = throughput_bound(_stats(), rates, prompt_lens=[3, 3], output_len=3, max_batch=8,
                             measured_output_tok_s=1.0)
    assert bound.linear_flops == 2 * 800 * 2 * (3 + 2)
    assert bound.lm_head_flops == 2 * 100 * 2 * 3
    # positions 0..4 attend to 1..5 keys: 15 per sequence, 4 * layers * heads * head_dim FLOPs each
    assert bound.attention_flops == 4 * 2 * 4 * 8 * 15 * 2
    assert bound.compute_seconds == pytest.approx(bound.flops / 1000)
    # decode: 2 tokens per sequence, both sequences in one step -> 2 steps; they read 4 and 5 keys
    assert (bound.decode_batch, bound.decode_steps) == (2, 2)
    assert bound.memory_bytes == 2 * 1800 + 2 * (4 + 5) * 10
    assert bound.memory_seconds == pytest.approx(bound.memory_bytes / 1000)
    assert bound.limited_by == "compute" and bound.min_seconds == bound.compute_seconds
    assert bound.output_tok_s == pytest.approx(6 / bound.min_seconds)
    # one sequence per step: twice the steps, and weights now outweigh the FLOPs
    narrow = throughput_bound(_stats(matmul_params=1, lm_head_params=1, num_layers=0), rates, [3, 3], 3,
                              max_batch=1, measured_output_tok_s=1.0)
    assert narrow.decode_steps == 4 and narrow.limited_by == "memory"
    assert narrow.min_seconds == narrow.memory_seconds


def test_sequential_bound_adds_matmuls_kv_reads_and_prefill_attention():
    rates = _rates()  # 1000 FLOP/s, 1000 B/s
    bound = throughput_bound(_stats(), rates, prompt_lens=[3, 3], output_len=3, max_batch=8,
                             measured_output_tok_s=1.0)
    matmuls = max((bound.linear_flops + bound.lm_head_flops) / 1000, 2 * 1800 / 1000)  # FLOPs vs 2 steps of weights
    kv = 2 * (4 + 5) * 10 / 1000
    assert bound.sequential_seconds == pytest.approx(matmuls + kv + bound.attention_flops / 1000)
    assert bound.sequential_seconds > bound.min_seconds, "running kernels one after another can only be slower"
    assert bound.sequential_output_tok_s == pytest.approx(6 / bound.sequential_seconds)
    fp8 = throughput_bound(_stats(), DeviceRates(device="cpu", copy_bytes=1, copy_bandwidth_gb_s=1e-6, matmul_size=1,
                                                 bf16_matmul_tflop_s=1e-9, fp8_matmul_tflop_s=2e-9, fp8_note=""),
                           prompt_lens=[3, 3], output_len=3, max_batch=8, measured_output_tok_s=1.0, fp8=True)
    assert fp8.matmul_tflop_s == 2e-9 and fp8.compute_seconds < bound.compute_seconds


@pytest.mark.parametrize("tied", [True, False])
def test_model_stats_count_a_tied_embedding_once(tiny_config, tmp_path, tied):
    from deepinfer import LLM
    from deepinfer.bench.model_stats import engine_model_stats

    path = tmp_path / "config.json"
    hf_config("llama", architectures=["LlamaForCausalLM"], tie_word_embeddings=tied).to_json_file(path)
    llm = LLM(str(path), load_format="dummy", max_model_len=32, dtype="float32", device="cpu")
    stats = engine_model_stats(llm)
    vocab, hidden = 384, 64
    body = sum(p.numel() for n, p in llm.engine.worker.model.named_parameters()
               if "embed" not in n and "lm_head" not in n)
    assert stats.param_count == body + vocab * hidden * (1 if tied else 2)
    assert stats.param_bytes == 4 * stats.param_count
    assert stats.weight_bytes_per_token == stats.param_bytes - (0 if tied else 4 * vocab * hidden)
    assert stats.matmul_params == body and stats.lm_head_params == vocab * hidden
    assert stats.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 KV heads, head_dim 16, fp32


# ---- on a GPU --------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_latency_and_throughput_free_the_device_for_the_baseline(tiny_config, tmp_path):
    for command, extra in (("latency", ["--num-iters", "2"]), ("throughput", ["--num-prompts", "8"])):
        out = tmp_path / f"{command}.json"
        assert main(["bench", command, "--model", tiny_config, "--load-format", "dummy", "--dtype", "bfloat16",
                     "--device", "cuda", "--max-num-seqs", "8", "--input-len", "16", "--output-len", "8",
                     "--compare-hf", "--roofline", "--output", str(out), *extra]) == 0
        result = json.loads(out.read_text())
        assert result["engine"]["device_memory_after_free_gib"] < 0.5, "the KV cache was not freed"
        assert result["roofline"]["device"]["copy_bandwidth_gb_s"] > 100
        assert result["environment"]["gpu"] and result["baseline"] is not None


def test_model_stats_count_weights_held_in_run_time_form(tiny_llama):
    """Packed (CPU bf16) and FP8 linears free their checkpoint tensor; the stats must still see them."""
    from deepinfer import LLM
    from deepinfer.bench.model_stats import engine_model_stats

    fp32 = engine_model_stats(LLM(tiny_llama, max_model_len=64, dtype="float32"))
    bf16 = engine_model_stats(LLM(tiny_llama, max_model_len=64, dtype="bfloat16"))
    fp8 = engine_model_stats(LLM(tiny_llama, max_model_len=64, dtype="bfloat16", quantization="fp8"))
    assert fp32.param_count == bf16.param_count == fp8.param_count
    assert bf16.param_bytes * 2 == fp32.param_bytes
    assert fp8.param_bytes < bf16.param_bytes


# ---- step profile ----------------------------------------------------------------------------------
def test_profile_summary_counts_overlapping_kernels_once_and_the_gaps_as_idle():
    from deepinfer.bench.step_profile import summarize

    # two overlapping kernels (0-10, 5-15), a gap, then one more (20-30): busy 25 of a 30 us span
    p = summarize([("gemm", 0.0, 10.0), ("attn", 5.0, 15.0), ("gemm", 20.0, 30.0)], steps=2, wall_s=0.001, skip=3)
    assert p.busy_ms_per_step == pytest.approx(0.0125) and p.span_ms_per_step == pytest.approx(0.015)
    assert p.idle_percent == pytest.approx(100 * 5 / 30)
    assert [(k.name, k.calls) for k in p.kernels] == [("gemm", 2), ("attn", 1)]
    assert p.kernels[0].percent == pytest.approx(100 * 20 / 30)


def test_step_profiler_covers_the_asked_window(tiny_llama):
    from deepinfer import LLM, SamplingParams
    from deepinfer.bench.step_profile import StepProfiler

    llm = LLM(tiny_llama, max_model_len=64)
    profiler = StepProfiler(llm.engine, skip=2, count=3)
    llm.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    result = profiler.close()
    assert result is not None and (result.skip_steps, result.steps) == (2, 3)
    assert llm.engine.step.__func__ is type(llm.engine).step, "close() restores the engine's step"
