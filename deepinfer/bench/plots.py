"""The PNG next to a result's JSON: deepinfer against transformers, and the roofline bound."""

from __future__ import annotations

from pathlib import Path

from deepinfer.bench.report import BenchResult

_COLORS = ("#2b6cb0", "#a0aec0")


def _title(result: BenchResult, what: str) -> str:
    env = result.environment
    hardware = env.get("gpu") or f"{env['cpu']}, {env['cpu_threads']} threads"
    return (f"{Path(result.engine['model_path']).name}, {result.engine['dtype']}, {what}\n"
            f"{hardware}, {env['date'][:10]}")


def _bar_chart(path: Path, names: list[str], values: list[float], label: str, fmt: str, title: str,
               bound: float | None, bound_label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display on benchmark machines
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    bars = ax.barh(names, values, color=_COLORS[: len(names)])
    ax.bar_label(bars, fmt=fmt, padding=4)
    top = max(values)
    if bound is not None:
        ax.axvline(bound, color="#c53030", linestyle="--", linewidth=1.2, label=bound_label)
        ax.legend(loc="lower right", fontsize=7)
        top = max(top, bound)
    ax.set_xlim(0, top * 1.3)
    ax.invert_yaxis()  # deepinfer on top
    ax.set_xlabel(label)
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_throughput(result: BenchResult, path: Path) -> None:
    m = result.metrics
    names, values = ["deepinfer"], [m.output_tok_s]
    if result.baseline is not None:
        names.append(f"transformers generate\n(batch {result.baseline.batch_size})")
        values.append(result.baseline.output_tok_s)
    bound, bound_label = None, ""
    if result.roofline is not None:
        bound = result.roofline.bound.output_tok_s
        bound_label = f"roofline bound {bound:.0f} tok/s ({result.roofline.bound.limited_by}-bound)"
    what = f"{m.num_requests} prompts x {result.workload.prompt_len.mean:.0f} in / {result.workload.output_len} out"
    _bar_chart(path, names, values, "output tokens / s (higher is better)", "%.0f tok/s", _title(result, what),
               bound, bound_label)


def plot_latency(result: BenchResult, path: Path) -> None:
    m = result.metrics
    names, values = ["deepinfer"], [m.decode_tok_s_per_seq.p50]
    if result.baseline is not None:
        names.append(f"transformers generate\n(batch {result.baseline.batch_size})")
        values.append(result.baseline.metrics.decode_tok_s_per_seq.p50)
    bound = result.roofline.bound.tok_s_per_seq if result.roofline is not None else None
    what = f"batch {m.batch_size}, {result.workload.prompt_len.mean:.0f} in / {m.output_len} out"
    _bar_chart(path, names, values, "decode tokens / s per sequence, median (higher is better)", "%.1f tok/s",
               _title(result, what), bound, f"memory bound {bound or 0:.1f} tok/s (measured copy bandwidth)")


def plot_result(result: BenchResult, path: Path) -> None:
    {"latency": plot_latency, "throughput": plot_throughput}[result.benchmark](result, path)
