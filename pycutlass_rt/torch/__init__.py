"""torch operators on pycutlass_rt's kernels: autograd, torch.compile and CUDA graphs.

Importing this package (it imports torch; ``import pycutlass_rt`` never does) registers,
through ``torch.library``, the operators of the ``pycutlass_rt::`` namespace::

    torch.ops.pycutlass_rt.mm(a, b)                           # a @ b
    torch.ops.pycutlass_rt.mm.out(a, b, out=d)                # into d (returns nothing)
    torch.ops.pycutlass_rt.linear(x, w, bias, activation)     # act(x @ w.T + bias), fused
    torch.ops.pycutlass_rt.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, activation)
                                                   # fp8 (block scales too), int8
    torch.ops.pycutlass_rt.quantize(x, dtype, granularity)  # (q, scale): fp8 or int8
    torch.ops.pycutlass_rt.grouped_mm(x, w, offs)             # MoE, as torch._grouped_mm
    torch.ops.pycutlass_rt.scaled_grouped_mm(x, w, scale_x, scale_w, offs, bias, out_dtype,
                                             activation)  # fp8 MoE, fused epilogue
    torch.ops.pycutlass_rt.conv2d(x, w, bias, stride, padding, dilation, groups,
                                  activation)  # act(F.conv2d(...)), fused; channels_last

and the functions :func:`mm`, :func:`linear`, :func:`scaled_mm`, :func:`quantize`,
:func:`grouped_mm`, :func:`scaled_grouped_mm` and :func:`conv2d` that call them, the
modules :class:`Linear` (``nn.Linear``'s parameters and state_dict, optionally with a
fused activation) and :class:`QuantLinear` (quantized weights as fp8 and int8 checkpoints
store them), and :func:`replace_linear`.

Each operator has a fake (meta) implementation written on symbolic sizes, so
``torch.compile(fullgraph=True)`` traces it without a graph break, with dynamic shapes;
its CUDA implementation allocates the output and makes one :func:`pycutlass_rt.gemm` (or
:func:`pycutlass_rt.moe_gemm`, :func:`pycutlass_rt.conv2d`) call on torch's current
stream, with no synchronization, so ``mode="reduce-overhead"`` captures it in its CUDA
graphs. ``mm``, ``linear`` and ``conv2d`` have autograd: the gradients are GEMMs (conv2d's:
dgrad and wgrad convolutions) on pycutlass_rt's kernels, computed by torch only where the
build's kernel list has none for their dtype and layout (logged once; never after one
problem's refusal, which raises :class:`UnsupportedError`, and never under
``PYCUTLASS_RT_STRICT=1``: ``_fallback`` says how).
The library's scratch memory comes from torch's caching allocator while this package is
imported (:func:`use_caching_allocator`), so torch's memory statistics count it.
CPU tensors are computed by torch's own CPU operators (the library has no CPU kernels),
so a model built on the CPU runs before it moves to the GPU.

The package's modules, one part each (this package imports the registering ones in
this order, so each registration happens once, after the schemas):

- ``_schema``: the ``torch.library.Library`` and the operators' schemas.
- ``_checks``: the argument checks shared by the fake and the real implementations.
- ``_fake``: the fake (meta) implementations, on symbolic sizes.
- ``_cuda``: the CUDA implementations, on pycutlass_rt's kernels.
- ``_cpu``: the CPU implementations, on torch's own operators.
- ``_autograd``: the backward formulas.
- ``_api``, ``_modules`` and ``_quantized``: the functions, ``Linear`` with
  ``replace_linear``, and ``QuantLinear``.
- ``_allocator``: the library's scratch from torch's caching allocator.

Example:
    >>> import torch, pycutlass_rt.torch as pt
    >>> lin = pt.Linear(64, 32, activation="gelu")
    >>> sorted(lin.state_dict()) == sorted(torch.nn.Linear(64, 32).state_dict())
    True

Example (on a GPU):
    >>> x = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16)
    >>> y = pt.linear(x, lin.weight.cuda().bfloat16(), activation="silu")
    >>> y.shape, y.dtype
    (torch.Size([8, 32]), torch.bfloat16)
    >>> f = torch.compile(lambda x, w: pt.linear(x, w, None, "gelu"), fullgraph=True)
"""

# isort: off
# The registrations, in order: the schemas, then the fake, CUDA and CPU implementations
# and autograd (a module registers its part when first imported: once).
from . import _schema, _fake, _cuda, _cpu, _autograd  # noqa: F401

# isort: on
from ._allocator import use_caching_allocator
from ._api import conv2d, grouped_mm, linear, mm, quantize, scaled_grouped_mm, scaled_mm
from ._checks import ACTIVATIONS
from ._modules import Linear, replace_linear
from ._quantized import QuantLinear

__all__ = [
    "ACTIVATIONS",
    "Linear",
    "QuantLinear",
    "conv2d",
    "grouped_mm",
    "linear",
    "mm",
    "quantize",
    "replace_linear",
    "scaled_grouped_mm",
    "scaled_mm",
    "use_caching_allocator",
]
