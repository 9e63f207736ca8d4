"""``deepinfer bench throughput``: offline generation throughput, with transformers as baseline.

Every prompt generates exactly ``output_len`` tokens (EOS ignored) so both engines do the same
work; the result is output tokens per second of wall time, after a warm-up.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from deepinfer.bench.environment import describe_environment
from deepinfer.bench.hf_baseline import hf_generate_throughput, load_hf_model
from deepinfer.bench.prompts import chat_prompt_ids


@dataclass
class ThroughputArgs:
    model: str | None = None
    """Model directory or .gguf file; None is the embedded SmolLM2-135M-Instruct."""
    dtype: str = "auto"
    """Weight and activation dtype for both engines."""
    device: str = "auto"
    """auto, cpu or cuda."""
    num_prompts: int = 16
    """Number of chat prompts (real questions through the chat template)."""
    output_len: int = 128
    """Tokens generated per prompt."""
    max_num_seqs: int = 256
    """deepinfer's limit on requests running at once."""
    compare_hf: bool = False
    """Also run transformers ``generate`` on the same prompts in this process."""
    hf_batch_size: int | None = None
    """Batch size of the transformers baseline; None puts all prompts in one batch."""
    repeats: int = 3
    """Timed runs per engine; the best is reported (the others show the spread)."""
    output: str | None = None
    """Write the JSON result here (and a PNG plot next to it)."""


@dataclass
class EngineRun:
    engine: str
    output_tokens: int
    seconds: list[float] = field(default_factory=list)

    @property
    def best_tokens_per_s(self) -> float:
        return self.output_tokens / min(self.seconds)


def run_throughput(args: ThroughputArgs) -> dict[str, Any]:
    from deepinfer import LLM, SamplingParams

    llm = LLM(args.model, dtype=args.dtype, device=args.device, max_num_seqs=args.max_num_seqs,
              max_model_len=1024)
    prompts = chat_prompt_ids(llm.get_tokenizer(), args.num_prompts)
    params = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True)
    llm.generate(prompts[:2], SamplingParams(max_tokens=4), use_tqdm=False)  # warm-up
    ours = EngineRun("deepinfer", args.num_prompts * args.output_len)
    for _ in range(args.repeats):
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        ours.seconds.append(time.perf_counter() - start)
        assert sum(len(o.outputs[0].token_ids) for o in outputs) == ours.output_tokens
    runs = [ours]
    if args.compare_hf:
        hf = load_hf_model(llm.engine.model_path, llm.engine.dtype, str(llm.engine.device))
        theirs = EngineRun("transformers generate", 0)
        for _ in range(args.repeats):
            r = hf_generate_throughput(hf, prompts, args.output_len, args.hf_batch_size or len(prompts),
                                       pad_token_id=llm.get_tokenizer().pad_token_id or 0)
            theirs.output_tokens = r.output_tokens
            theirs.seconds.append(r.seconds)
        runs.append(theirs)
    result = {
        "benchmark": "throughput",
        "args": asdict(args),
        "model": llm.engine.model_path,
        "dtype": str(llm.engine.dtype).replace("torch.", ""),
        "device": str(llm.engine.device),
        "prompt_tokens": [len(p) for p in prompts],
        "environment": describe_environment(),
        "runs": [{"engine": r.engine, "output_tokens": r.output_tokens, "seconds": r.seconds,
                  "best_output_tokens_per_s": r.best_tokens_per_s} for r in runs],
    }
    if args.compare_hf:
        result["speedup_vs_transformers"] = runs[0].best_tokens_per_s / runs[1].best_tokens_per_s
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2))
        plot_throughput(result, Path(args.output).with_suffix(".png"))
    return result


def plot_throughput(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["engine"] for r in result["runs"]]
    values = [r["best_output_tokens_per_s"] for r in result["runs"]]
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    bars = ax.barh(names, values, color=["#2b6cb0", "#a0aec0"][: len(names)])
    ax.bar_label(bars, fmt="%.0f tok/s", padding=4)
    ax.set_xlabel("output tokens / s (higher is better)")
    env = result["environment"]
    hardware = env.get("gpu") or f"{env['cpu']}, {env['cpu_threads']} threads"
    ax.set_title(f"{Path(result['model']).name}, {result['dtype']}, {len(result['prompt_tokens'])} prompts x "
                 f"{result['args']['output_len']} tokens\n{hardware}, {env['date'][:10]}", fontsize=8)
    ax.set_xlim(0, max(values) * 1.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
