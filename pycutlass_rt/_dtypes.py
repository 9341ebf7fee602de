"""Dtype names: one spelling out, two in.

The library prints a dtype as torch names it ("bfloat16", "float8_e4m3fn"; "tfloat32":
float32 tensors on TF32 tensor cores). Every entry point that takes a dtype by name (tune's
``dtype`` and ``out_dtype``, matmul's and pycutlass_rt.jax's ``out_dtype``, quantize's
``dtype``, the command line's ``--dtype`` and ``--out-dtype``) also takes the word kernel
names use ("bf16", "e4m3", "s8"), through :func:`dtype_name`.
"""

from __future__ import annotations

from ._abi import Dtype
from .errors import DTypeError

#: pcr_dtype -> the dtype's name, as torch spells it ("tfloat32": float32 tensors on TF32
#: tensor cores)
DTYPE_NAMES = {
    Dtype.F16: "float16",
    Dtype.BF16: "bfloat16",
    Dtype.F32: "float32",
    Dtype.F64: "float64",
    Dtype.TF32: "tfloat32",
    Dtype.E4M3: "float8_e4m3fn",
    Dtype.E5M2: "float8_e5m2",
    Dtype.S8: "int8",
    Dtype.S32: "int32",
}
#: a kernel name's dtype word (the pcr_dtype's token: "bf16") -> the dtype's name
DTYPE_TOKENS = {code.token: name for code, name in DTYPE_NAMES.items()}
#: bytes per element, by dtype name (tfloat32: a float32 tensor)
DTYPE_BYTES = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "tfloat32": 4,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
    "int32": 4,
}


def dtype_name(dtype: object, what: str = "dtype") -> str:
    """The name of ``dtype`` as the library spells it (torch's), from that name, from a
    kernel name's word for it, or from a framework's dtype (``torch.bfloat16``,
    ``numpy.dtype("float16")``, ``numpy.int8``).

    Raises:
        DTypeError: a dtype the library has no name for (the message lists both spellings
            and begins with ``what``).

    >>> dtype_name("bf16"), dtype_name("float8_e4m3fn"), dtype_name("S8")
    ('bfloat16', 'float8_e4m3fn', 'int8')
    """
    if isinstance(dtype, str):
        text = dtype.strip().lower()
    else:  # torch.float16 -> "torch.float16"; numpy.int8 -> "<class 'numpy.int8'>"
        text = str(dtype).removeprefix("<class '").removesuffix("'>").rpartition(".")[2]
    name = DTYPE_TOKENS.get(text, text)
    if name not in DTYPE_BYTES:
        raise DTypeError(
            f"{what} {dtype!r}: one of {', '.join(DTYPE_BYTES)} (or {', '.join(DTYPE_TOKENS)})"
        )
    return name
