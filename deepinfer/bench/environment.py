"""What a benchmark result records about where it ran."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from typing import Any

import torch


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_environment() -> dict[str, Any]:
    import transformers

    import deepinfer

    env: dict[str, Any] = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        # The process's own command line; the result's "command" is the equivalent deepinfer command.
        "argv": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "python": platform.python_version(),
        "deepinfer": deepinfer.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu": _cpu_name(),
        "cpu_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env["gpu"] = torch.cuda.get_device_name()
        env["gpu_count"] = torch.cuda.device_count()
        env["gpu_memory_gib"] = round(props.total_memory / (1 << 30), 1)
        env["gpu_compute_capability"] = f"{props.major}.{props.minor}"
        env["cuda"] = torch.version.cuda
        try:
            import triton

            env["triton"] = triton.__version__
        except ImportError:
            pass
    return env
