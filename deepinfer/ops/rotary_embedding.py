"""Rotary position embedding of many heads at once (q and k together), from a cos/sin table."""

from __future__ import annotations

import torch

from deepinfer.ops.dispatch import get_op
from deepinfer.ops.step_memo import StepMemo

_angles_memo = StepMemo()


def rotary_embedding_ref(x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """The rotated copy of ``x``; see ``rotary_embedding``.

    Computed as ``x * cos + partner(x) * signed_sin`` in x's dtype (cos/sin rounded to it first),
    which equals Hugging Face's ``q * cos + rotate_half(q) * sin`` exactly.
    """
    rot = cos_sin.shape[-1]
    half = rot // 2
    cos, sin = _angles_memo.get((positions, cos_sin, x.dtype),
                                lambda: cos_sin[positions].to(x.dtype).unsqueeze(1).split(half, dim=-1))
    x_rot = x[..., :rot]
    if is_neox:
        x1, x2 = x_rot[..., :half], x_rot[..., half:]
        out = torch.cat((x1 * cos + x2 * -sin, x2 * cos + x1 * sin), dim=-1)
    else:
        x1, x2 = x_rot[..., 0::2], x_rot[..., 1::2]
        out = torch.stack((x1 * cos + x2 * -sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    return out if rot == x.shape[-1] else torch.cat((out, x[..., rot:]), dim=-1)


def rotary_embedding(x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """Rotate the first ``rotary_dim`` features of every head of ``x`` [T, heads, head_dim] by the
    angle of its token's position. ``cos_sin`` [max_position, rotary_dim] holds cos of the
    rotary_dim/2 frequencies in its first half and sin in its second (float32); ``positions`` [T].
    ``is_neox``: rotate the two halves of the rotary features (Llama, Qwen) rather than adjacent
    pairs (GPT-J, DeepSeek)."""
    return get_op("rotary_embedding", x.device.type)(x, positions, cos_sin, is_neox)
