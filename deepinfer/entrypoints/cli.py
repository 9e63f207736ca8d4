"""The ``deepinfer`` command: generate, chat, env.

Engine and sampling flags are made from the fields of EngineConfig and SamplingParams (with
their docstrings as help), so every config field is a flag and the two never drift apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import types
import typing
from typing import Any, Sequence

from deepinfer import envs
from deepinfer.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig
from deepinfer.docs_of import field_docs
from deepinfer.sampling_params import SamplingParams

_ENGINE_GROUPS = (ModelConfig, CacheConfig, SchedulerConfig, DeviceConfig)
_CLI_SAMPLING_DEFAULTS = {"temperature": 0.0, "max_tokens": 128}
"""The CLI is greedy and a bit longer by default, so that a demo is reproducible."""


def _base_type(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _base_type(args[0])
    return hint


def _add_dataclass_flags(parser: argparse.ArgumentParser, cls: type, title: str,
                         defaults: dict[str, Any] | None = None, skip: tuple[str, ...] = ()) -> None:
    group = parser.add_argument_group(title)
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    defaults = defaults or {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        hint = _base_type(hints[f.name])
        default = defaults.get(f.name, f.default if f.default is not dataclasses.MISSING else f.default_factory())
        help_text = f"{docs.get(f.name, '')} (default: {default})".replace("%", "%%")
        if hint is bool:
            group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=default,
                               help=help_text)
        elif typing.get_origin(hint) is list:
            item = typing.get_args(hint)[0]
            group.add_argument(flag, dest=f.name, type=item, nargs="+", default=default, help=help_text)
        elif f.name == "stop":
            group.add_argument(flag, dest=f.name, action="append", default=None, help=help_text + "; repeatable")
        else:
            group.add_argument(flag, dest=f.name, type=hint, default=default, help=help_text)


def _engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {f.name: getattr(args, f.name) for cls in _ENGINE_GROUPS for f in dataclasses.fields(cls)}


def _sampling_params(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SamplingParams)
                             if f.name != "seed"})


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
    for cls in _ENGINE_GROUPS:
        _add_dataclass_flags(parser, cls, f"engine ({cls.__name__})")
    # The engine's --seed already makes sampling reproducible, so the per-request seed is not a flag.
    _add_dataclass_flags(parser, SamplingParams, "sampling", defaults=_CLI_SAMPLING_DEFAULTS, skip=("seed",))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="deepinfer", description="deepinfer LLM inference engine")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate completions for one or more prompts")
    gen.add_argument("--prompt", action="append", required=True, help="prompt text; repeat for a batch")
    gen.add_argument("--chat", action="store_true", help="send each prompt as a user message through the chat template")
    _add_model_flags(gen)

    chat = sub.add_parser("chat", help="interactive chat that streams the reply (/reset clears, /exit quits)")
    chat.add_argument("--system", default=None, help="system message that starts the conversation")
    _add_model_flags(chat)

    sub.add_parser("env", help="list every DEEPINFER_* environment variable with its value")

    bench = sub.add_parser("bench", help="benchmarks (latency, throughput)").add_subparsers(dest="bench",
                                                                                           required=True)
    for name, help_text in _BENCH_HELP.items():
        _add_bench_flags(bench.add_parser(name, help=help_text, description=help_text, epilog=_BENCH_EXAMPLES[name],
                                          formatter_class=argparse.RawDescriptionHelpFormatter), name)
    return parser


# ---- bench ---------------------------------------------------------------------------------------
_BENCH_HELP = {
    "latency": "end-to-end latency, TTFT, TPOT of a batch of requests (optionally vs transformers, roofline)",
    "throughput": "offline throughput of many prompts submitted at once (optionally vs transformers, roofline)",
}
_BENCH_EXAMPLES = {
    "latency": """example (Llama 3 8B shapes, random weights, batch 1, 128 tokens in, 256 out):
  deepinfer bench latency --model llama3-8b --load-format dummy --dtype bfloat16 \\
      --input-len 128 --output-len 256 --batch-size 1 --compare-hf --roofline --output latency.json""",
    "throughput": """example (1000 prompts, 1000 tokens in, 1000 out; transformers timed on its first batch):
  deepinfer bench throughput --model llama3-8b --load-format dummy --dtype bfloat16 \\
      --num-prompts 1000 --input-len 1000 --output-len 1000 --compare-hf --hf-num-prompts 128 \\
      --roofline --output throughput.json""",
}


def _add_bench_flags(parser: argparse.ArgumentParser, benchmark: str) -> None:
    from deepinfer.bench.args import COMMAND_DEFAULTS, COMMAND_SKIPS, BenchArgs

    # Every engine flag, as `generate` has them; sampling is fixed (greedy, exactly output_len tokens).
    for cls in _ENGINE_GROUPS:
        _add_dataclass_flags(parser, cls, f"engine ({cls.__name__})")
    _add_dataclass_flags(parser, BenchArgs, f"benchmark ({BenchArgs.__name__})", defaults=COMMAND_DEFAULTS[benchmark],
                         skip=COMMAND_SKIPS[benchmark])
    parser.set_defaults(bench_parser=parser)


def _bench_command_line(args: argparse.Namespace) -> str:
    """A command line that repeats this run: the subcommand and every flag whose value is not its
    default (the literal argv is not passed down to here; this is equivalent and canonical)."""
    import shlex

    words = ["deepinfer", "bench", args.bench]
    for action in args.bench_parser._actions:
        if not action.option_strings or action.dest in ("help", "bench_parser"):
            continue
        value = getattr(args, action.dest, None)
        if value == action.default:
            continue
        flag = action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            words.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list):
            words += [flag, *map(str, value)]
        else:
            words += [flag, str(value)]
    return shlex.join(words)


def _make_llm(args: argparse.Namespace):
    from deepinfer.entrypoints.llm import LLM

    return LLM(**_engine_kwargs(args))


def cmd_generate(args: argparse.Namespace) -> int:
    params = _sampling_params(args)
    llm = _make_llm(args)
    start = time.perf_counter()
    if args.chat:
        outputs = llm.chat([[{"role": "user", "content": p}] for p in args.prompt], params, use_tqdm=False)
    else:
        outputs = llm.generate(args.prompt, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    total = 0
    for prompt, out in zip(args.prompt, outputs):
        print(f"### prompt: {prompt!r}")
        for c in out.outputs:
            label = f"### completion {c.index}" if len(out.outputs) > 1 else "### completion"
            print(f"{label} ({len(c.token_ids)} tokens, finish_reason={c.finish_reason}):")
            print(c.text)
            total += len(c.token_ids)
    print(f"### {total} tokens in {elapsed:.2f} s ({total / elapsed:.1f} tok/s)", file=sys.stderr)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    params = _sampling_params(args)
    llm = _make_llm(args)
    messages: list[dict[str, str]] = [{"role": "system", "content": args.system}] if args.system else []
    interactive = sys.stdin.isatty()
    print("deepinfer chat: type a message; /reset clears the conversation, /exit (or Ctrl-D) quits.")
    while True:
        try:
            line = input("user> " if interactive else "")
        except EOFError:
            print()
            return 0
        text = line.strip()
        if not text:
            continue
        if text == "/exit":
            return 0
        if text == "/reset":
            messages = messages[:1] if args.system else []
            print("(conversation cleared)")
            continue
        messages.append({"role": "user", "content": text})
        print("assistant> ", end="", flush=True)
        reply = ""
        for reply_so_far in llm.stream_chat(messages, params):
            print(reply_so_far[len(reply):], end="", flush=True)
            reply = reply_so_far
        print()
        messages.append({"role": "assistant", "content": reply})


def cmd_env(args: argparse.Namespace) -> int:
    rows = [(v.name, v.type.__name__, repr(v.default), repr(v.value()) + ("" if v.is_set() else " (default)"), v.doc)
            for v in envs.ENV_VARS.values()]
    headers = ("name", "type", "default", "current", "doc")
    widths = [max(len(r[i]) for r in rows + [headers]) for i in range(4)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)) + "  doc")
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[4])
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from deepinfer.bench.args import BenchArgs
    from deepinfer.bench.latency import format_latency, run_latency
    from deepinfer.bench.report import write_result
    from deepinfer.bench.throughput import format_throughput, run_throughput

    run, describe = {"latency": (run_latency, format_latency),
                     "throughput": (run_throughput, format_throughput)}[args.bench]
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(BenchArgs) if hasattr(args, f.name)}
    bench_args = BenchArgs.for_command(args.bench, **given)
    result = run(bench_args, _engine_kwargs(args), _bench_command_line(args))
    print(describe(result))
    if bench_args.output:
        png = write_result(result, bench_args.output)
        print(f"wrote {bench_args.output} and {png}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {"generate": cmd_generate, "chat": cmd_chat, "env": cmd_env, "bench": cmd_bench}[args.command]
    try:
        return handler(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"deepinfer {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
