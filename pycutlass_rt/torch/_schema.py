"""The ``pycutlass_rt::`` operators' schemas, and handles to call them by.

Importing this module (once: a ``torch.library.Library`` namespace is process-wide)
defines the schemas on :data:`_LIB`, on which the other modules of the package register
the fake, CUDA, CPU and autograd implementations; it refuses a torch older than 2.4.

``Library.define`` + ``Library.impl`` rather than ``torch.library.custom_op``: the
dispatcher calls the Python kernels directly, without custom_op's per-call wrapper (its
argument binding and device selection); benchmarks/torch_ops.py measures both against
torch.mm.
"""

import torch

if not hasattr(torch.library, "register_fake") or not hasattr(torch.library, "register_autograd"):
    raise ImportError(
        f"pycutlass_rt.torch needs torch 2.4 or later (torch.library.register_fake and "
        f"register_autograd); this is torch {torch.__version__}"
    )

_LIB = torch.library.Library("pycutlass_rt", "DEF")
_LIB.define("mm(Tensor a, Tensor b) -> Tensor")
# Returns nothing, as torch.compile functionalizes a mutating custom op on every torch
# from 2.4 on only then (an aliasing return needs torch.Tag.out, which is newer).
_LIB.define("mm.out(Tensor a, Tensor b, *, Tensor(a!) out) -> ()")
_LIB.define("linear(Tensor x, Tensor w, Tensor? bias=None, str? activation=None) -> Tensor")
_LIB.define(
    "scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
    "ScalarType? out_dtype=None, str? activation=None, bool use_fast_accum=False) -> Tensor"
)
# x quantized to fp8 e4m3 or int8 with its scales (pycutlass_rt.quantize): (q, scale)
_LIB.define("quantize(Tensor x, ScalarType dtype, str granularity) -> (Tensor, Tensor)")
_LIB.define("grouped_mm(Tensor x, Tensor w, Tensor offs) -> Tensor")
# The fp8 MoE layer's GEMM, as torch._scaled_grouped_mm's 2-D x by 3-D w case, with a bias
# and an activation fused (pycutlass_rt.moe_gemm's dequantizing epilogue)
_LIB.define(
    "scaled_grouped_mm(Tensor x, Tensor w, Tensor scale_x, Tensor scale_w, Tensor offs, "
    "Tensor? bias=None, ScalarType? out_dtype=None, str? activation=None) -> Tensor"
)
# The backward passes' GEMMs: mm's kernel, or torch.mm where the build has none for the
# dtype and layout. Not for users: forward calls raise UnsupportedError instead.
_LIB.define("_grad_mm(Tensor a, Tensor b) -> Tensor")
# torch.nn.functional.conv2d's convolution on channels_last tensors, with the bias and an
# activation fused. An int passed for an int[2] is broadcast to both (as F.conv2d's); torch
# prints the pairs' defaults [1, 1] and [0, 0] as 1 and 0.
_LIB.define(
    "conv2d(Tensor x, Tensor w, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
    "int[2] dilation=1, int groups=1, str? activation=None) -> Tensor"
)
# Its backward passes (torch.nn.grad.conv2d_input's and conv2d_weight's): the library's
# dgrad and wgrad kernels, or torch's where the build has none. Not for users.
_LIB.define(
    "_conv2d_dgrad(Tensor dy, Tensor w, SymInt[4] input_size, int[2] stride, int[2] padding, "
    "int[2] dilation, int groups) -> Tensor"
)
_LIB.define(
    "_conv2d_wgrad(Tensor dy, Tensor x, SymInt[4] weight_size, int[2] stride, int[2] padding, "
    "int[2] dilation, int groups) -> Tensor"
)

_OPS = torch.ops.pycutlass_rt
_mm, _mm_out = _OPS.mm.default, _OPS.mm.out
_linear, _scaled_mm = _OPS.linear.default, _OPS.scaled_mm.default
_quantize = _OPS.quantize.default
_grouped_mm, _grad_mm = _OPS.grouped_mm.default, _OPS._grad_mm.default
_scaled_grouped_mm = _OPS.scaled_grouped_mm.default
_conv2d = _OPS.conv2d.default
_conv2d_dgrad, _conv2d_wgrad = _OPS._conv2d_dgrad.default, _OPS._conv2d_wgrad.default
