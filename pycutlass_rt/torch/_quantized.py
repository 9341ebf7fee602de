""":class:`QuantLinear`: a linear layer on quantized weights stored as checkpoints store them,
its activations quantized on the fly.

Formats (``QuantLinear.FORMATS``), each a checkpoint layout people serve:

- ``"block_fp8"``: DeepSeek-V3/R1, Qwen3-FP8 (Hugging Face): ``weight`` float8_e4m3fn (N, K),
  ``weight_scale_inv`` float32 (ceil(N/128), ceil(K/128)), one per 128x128 block;
  activations quantized per token and group of 128 (e4m3). The GEMM scales each 128 of K.
- ``"fp8"``: per-channel fp8 (compressed-tensors' channel strategy, vLLM): ``weight``
  float8_e4m3fn (N, K), ``weight_scale`` (N, 1); activations per token, dynamic.
- ``"int8"``: W8A8 int8 (compressed-tensors, symmetric): ``weight`` int8 (N, K),
  ``weight_scale`` (N, 1); activations per token, dynamic, symmetric (a checkpoint with an
  activation zero point is refused when it loads).

Dequantized, every format computes ``x @ (weight * scale).T + bias``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._api import quantize, scaled_mm
from ._checks import _act_name


@dataclass(frozen=True)
class Format:
    """How a checkpoint stores a quantized linear layer, and how its activations are
    quantized."""

    weight_dtype: torch.dtype
    scale_name: str  # the state_dict key of the weight's scales
    weight_granularity: str  # quantize()'s granularity of the weight: "block" or "token"
    act_dtype: torch.dtype
    act_granularity: str  # of the activations: "group" or "token"

    def scale_shape(self, out_features: int, in_features: int) -> tuple:
        if self.weight_granularity == "block":
            return (-(-out_features // 128), -(-in_features // 128))
        return (out_features, 1)


FORMATS = {
    "block_fp8": Format(
        torch.float8_e4m3fn, "weight_scale_inv", "block", torch.float8_e4m3fn, "group"
    ),
    "fp8": Format(torch.float8_e4m3fn, "weight_scale", "token", torch.float8_e4m3fn, "token"),
    "int8": Format(torch.int8, "weight_scale", "token", torch.int8, "token"),
}


class QuantLinear(nn.Module):
    """A linear layer on quantized weights (``FORMATS``), with activations quantized on the
    fly: ``act(quantize(x) @ weight.T`` dequantized ``+ bias)`` as one quantization pass and
    one scaled GEMM (:func:`scaled_mm`), both operators that ``torch.compile(fullgraph=True,
    mode="reduce-overhead")`` traces and captures.

    Its state_dict holds what the format's checkpoints hold (``weight``, the scales under
    their checkpoint name, ``bias``), so ``load_state_dict`` takes a checkpoint's tensors
    as stored; :meth:`from_linear` quantizes a float ``nn.Linear`` instead.

    Args:
        in_features, out_features, bias: as for ``nn.Linear``.
        format: "block_fp8", "fp8" or "int8".
        out_dtype: the output's dtype (and the bias's): bfloat16 (default) or float16.
        activation: None or one of ``ACTIVATIONS``, fused after the bias.
        fast_accum: for the fp8 formats, let the GEMM accumulate the products in the MMA's
            reduced precision (``torch._scaled_mm``'s ``use_fast_accum``; the "fp8" format's
            kernels have it, block scales add each 128 of K in float32 anyway); off by
            default. The int8 format ignores it.
        device: where the buffers live.

    Example:
        >>> import torch, pycutlass_rt.torch as pt
        >>> lin = pt.QuantLinear(7168, 2048, bias=False, format="block_fp8")
        >>> {k: tuple(v.shape) for k, v in lin.state_dict().items()}
        {'weight': (2048, 7168), 'weight_scale_inv': (16, 56)}

    Example (on a GPU with block-scaled fp8 kernels):
        >>> y = lin.cuda()(torch.randn(4, 7168, device="cuda", dtype=torch.bfloat16))
        >>> y.shape, y.dtype
        (torch.Size([4, 2048]), torch.bfloat16)
    """

    FORMATS = FORMATS

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        format: str = "block_fp8",
        out_dtype: torch.dtype = torch.bfloat16,
        activation: str | None = None,
        device=None,
        fast_accum: bool = False,
    ):
        super().__init__()
        if format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(map(repr, FORMATS))}: {format!r}")
        if out_dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"out_dtype is torch.bfloat16 or torch.float16, got {out_dtype}")
        fmt = self.format = FORMATS[format]
        self.format_name = format
        self.in_features, self.out_features = in_features, out_features
        self.out_dtype = out_dtype
        self.activation = _act_name(activation)
        self.fast_accum = bool(fast_accum)
        self.register_buffer(
            "weight", torch.empty(out_features, in_features, dtype=fmt.weight_dtype, device=device)
        )
        self.register_buffer(
            fmt.scale_name,
            torch.ones(
                fmt.scale_shape(out_features, in_features), dtype=torch.float32, device=device
            ),
        )
        self.bias = (
            nn.Parameter(
                torch.zeros(out_features, dtype=out_dtype, device=device), requires_grad=False
            )
            if bias
            else None
        )
        self._register_load_state_dict_pre_hook(self._checked_load)

    @property
    def weight_scales(self) -> torch.Tensor:
        """The weight's scales, whatever the format names them."""
        return getattr(self, self.format.scale_name)

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, format: str = "block_fp8", activation: str | None = None
    ) -> QuantLinear:
        """The layer with ``linear``'s float weight quantized (per 128x128 block for
        "block_fp8", per output channel otherwise) and its bias in ``out_dtype``.

        Example:
            >>> import torch, pycutlass_rt.torch as pt
            >>> q = pt.QuantLinear.from_linear(torch.nn.Linear(256, 384), "fp8")
            >>> q.weight.dtype, tuple(q.weight_scales.shape)
            (torch.float8_e4m3fn, (384, 1))
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach()
        out_dtype = w.dtype if w.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
        new = cls(
            linear.in_features,
            linear.out_features,
            linear.bias is not None,
            format,
            out_dtype,
            activation,
            device=w.device,
        )
        fmt = new.format
        q, s = quantize(w, fmt.weight_dtype, fmt.weight_granularity)
        new.weight.copy_(q)
        new.weight_scales.copy_(s.reshape(new.weight_scales.shape))
        if linear.bias is not None:
            new.bias.data.copy_(linear.bias.detach())
        return new

    def _checked_load(self, state_dict, prefix, *args):
        """Refuses what a checkpoint may hold but this layer does not compute: an
        activation zero point (asymmetric int8) or static input scales."""
        for key in ("input_zero_point", "input_scale"):
            if prefix + key in state_dict:
                raise ValueError(
                    f"{prefix}{key}: static or asymmetric activation quantization is not "
                    "supported by QuantLinear (its activations are quantized dynamically, "
                    "symmetric, per token)"
                )

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        fmt = self.format
        q, s = quantize(x2, fmt.act_dtype, fmt.act_granularity)
        y = scaled_mm(
            q,
            self.weight.t(),
            s,
            self.weight_scales.t(),
            self.bias,
            self.out_dtype,
            self.activation,
            self.fast_accum,
        )
        return y.reshape(*shape[:-1], self.out_features)

    def dequantized_weight(self) -> torch.Tensor:
        """The weight as float32: each element times its scale (for checks and references)."""
        w, s = self.weight.float(), self.weight_scales
        if self.format.weight_granularity == "block":
            s = s.repeat_interleave(128, 0).repeat_interleave(128, 1)
            s = s[: self.out_features, : self.in_features]
        return w * s

    def extra_repr(self) -> str:
        act = f", activation={self.activation!r}" if self.activation else ""
        act += ", fast_accum=True" if self.fast_accum else ""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, format={self.format_name!r}{act}"
        )
