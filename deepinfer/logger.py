"""The package logger: one handler on the ``deepinfer`` logger, level from envs."""

from __future__ import annotations

import logging

from deepinfer import envs

_FORMAT = "%(levelname)s %(asctime)s %(name)s] %(message)s"
_configured = False


def init_logger(name: str) -> logging.Logger:
    global _configured
    if not _configured:
        root = logging.getLogger("deepinfer")
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
        root.addHandler(handler)
        root.setLevel(envs.DEEPINFER_LOG_LEVEL)
        root.propagate = False
        _configured = True
    return logging.getLogger(name)
