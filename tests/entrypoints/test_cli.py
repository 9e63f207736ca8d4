"""The deepinfer command line."""

from __future__ import annotations

import io
import subprocess
import sys

from deepinfer.entrypoints.cli import main


def test_env_lists_every_declared_variable(capsys, monkeypatch):
    from deepinfer import envs

    monkeypatch.setenv("DEEPINFER_CPU_THREADS", "3")
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    for var in envs.ENV_VARS.values():
        assert var.name in out and var.doc in out
    assert "3" in out.split("DEEPINFER_CPU_THREADS")[1].splitlines()[0]


def test_generate_prints_completions(tiny_llama, capsys):
    assert main(["generate", "--model", tiny_llama, "--prompt", "Hello world", "--prompt", "The quick",
                 "--max-tokens", "6", "--max-model-len", "64"]) == 0
    out = capsys.readouterr().out
    assert out.count("### prompt:") == 2
    assert out.count("(6 tokens, finish_reason=length)") == 2


def test_generate_matches_the_api(tiny_llama, capsys):
    from deepinfer import LLM, SamplingParams

    main(["generate", "--model", tiny_llama, "--prompt", "Hello world", "--max-tokens", "6", "--max-model-len", "64"])
    printed = capsys.readouterr().out.split("finish_reason=length):\n")[1].rsplit("\n", 1)[0]
    expected = LLM(tiny_llama, max_model_len=64).generate("Hello world", SamplingParams(temperature=0, max_tokens=6),
                                                          use_tqdm=False)[0].outputs[0].text
    assert printed == expected


def test_generate_bad_flag_value_is_a_clear_error(tiny_llama, capsys):
    assert main(["generate", "--model", tiny_llama, "--prompt", "x", "--top-p", "0"]) == 2
    assert "top_p must be in (0, 1]" in capsys.readouterr().err


def test_chat_streams_replies_and_resets(tiny_llama, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello world\n/reset\nHello world\n"))
    assert main(["chat", "--model", tiny_llama, "--max-tokens", "5", "--max-model-len", "128"]) == 0
    out = capsys.readouterr().out
    replies = [line.split("assistant> ", 1)[1] for line in out.splitlines() if line.startswith("assistant> ")]
    assert len(replies) == 2 and replies[0] == replies[1], "after /reset the same question gets the same reply"
    assert "(conversation cleared)" in out


def test_console_script_is_installed():
    result = subprocess.run([sys.executable, "-m", "deepinfer.entrypoints.cli", "--help"], capture_output=True,
                            text=True)
    assert result.returncode == 0 and "generate" in result.stdout and "chat" in result.stdout
