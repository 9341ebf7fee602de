"""Helpers shared by the CPU and GPU test trees.

Without a GPU (or torch, or jax) the GPU suite skips, saying why. The GPU runs set
``PYCUTLASS_RT_REQUIRE_GPU=1`` (:data:`REQUIRE_GPU`): then whatever would have skipped it
for the environment's sake (no GPU, a broken driver, no torch, no jax or no JAX handler
in the library, a build with no kernel for this GPU) is an error instead
(:func:`environment_skip`, tests/gpu/conftest.py), and only what the build genuinely
lacks still skips (:func:`require`).
"""

import functools
import os
import re

#: the GPU runs' switch: set (to anything but "", "0", "false", "no" or "off"), a GPU suite
#: that cannot run here in full fails instead of skipping
REQUIRE_GPU = "PYCUTLASS_RT_REQUIRE_GPU"


def require_gpu_mode():
    """Whether ``PYCUTLASS_RT_REQUIRE_GPU`` is set: a GPU, torch and jax must be usable."""
    value = os.environ.get(REQUIRE_GPU, "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


def environment_skip(reason):
    """Skips the calling test for a reason of this machine's (no GPU, no framework), or
    under ``PYCUTLASS_RT_REQUIRE_GPU=1`` fails it with that reason."""
    import pytest

    if require_gpu_mode():
        pytest.fail(f"{REQUIRE_GPU}=1, but {reason}", pytrace=False)
    pytest.skip(reason)


@functools.cache
def gpu_reason():
    """None when a GPU is usable, else why not."""
    import pycutlass_rt as pcr

    try:
        info = pcr.info()
    except pcr.LibraryError as e:
        return f"library not loadable: {e}"
    except pcr.Error as e:  # a driver that answers the device count but not the devices
        return f"the GPUs cannot be queried: {e}"
    if not info["devices"]:
        return f"no usable GPU: {info['device_error']}"
    return None


@functools.cache
def torch_reason():
    """None when torch can run the GPU suite's tensors and references (it imports and sees
    a CUDA device), else why not."""
    try:
        import torch
    except ImportError as e:
        return f"the GPU suite uses torch for references and tensors; torch is not importable ({e})"
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        return f"torch {torch.__version__} ({build}) sees no CUDA device"
    return None


@functools.cache
def jax_reason():
    """None when pycutlass_rt.jax can run here (jax imports and sees a CUDA device, and the
    library holds the JAX handler: ``info()["build"]["jax_handler"]``), else why not."""
    # JAX takes 75% of the GPU when its backend starts unless told not to; the rest of the
    # suite (torch) needs it
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
    except ImportError as e:
        return f"jax is not importable ({e}): pip install 'jax[cuda13]'"
    import pycutlass_rt as pcr
    import pycutlass_rt.jax as pcr_jax

    try:
        handler = pcr.info()["build"].get("jax_handler") or {"built": False}
    except pcr.Error as e:
        return f"library not loadable: {e}"
    if not handler.get("built") or not pcr_jax.available():
        return (
            f"the library has no JAX handler ({pcr_jax.SYMBOL}; build info {handler}): "
            "rebuild it without PYCUTLASS_RT_XLA_FFI_INCLUDE=OFF"
        )
    try:
        jax.devices("cuda")
    except RuntimeError as e:
        return f"jax {jax.__version__} sees no CUDA device ({e}): pip install 'jax[cuda13]'"
    return None


def gpu_suite_reasons():
    """Why the GPU suite cannot run here in full, one reason a line ([]: it can): no GPU,
    torch's and jax's reasons, a torch too old for pycutlass_rt.torch, no kernel of the
    build for GPU 0."""
    reasons = [r for r in (gpu_reason(), torch_reason(), jax_reason()) if r]
    if torch_reason() is None:
        import torch

        major, minor = (int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
        if (major, minor) < (2, 4):
            reasons.append(f"torch {torch.__version__} is older than pycutlass_rt.torch's 2.4")
    if gpu_reason() is None:
        import pycutlass_rt as pcr

        dev = pcr.info()["devices"][0]
        if not dev["kernels_runnable"]:
            reasons.append(
                f"no kernel of this build runs on GPU 0 ({dev['name']}, compute capability "
                f"{dev['cc']}): build for its arch (PYCUTLASS_RT_ARCHS)"
            )
    return reasons


def built_kernels(block_scaled=False):
    """This build's kernels, asked of the list only (nothing runs): those that read fp8
    block scales (``block_scaled=True``), those that do not (the default: what a call without
    block-scale grids can run), or all (None)."""
    import pycutlass_rt as pcr

    return [
        k for k in pcr.kernels() if block_scaled is None or (k.scale_m != "none") == block_scaled
    ]


def runnable_kernels(
    kind=None, grouped=False, op="gemm", block_scaled=False, depthwise=False, direct=False
):
    """The build's kernels that run on GPU 0 ([] without a GPU), in registry order.

    ``kind``: a function of a KernelInfo; only the first kernel of each kind is kept
    (one per family and split, say). ``grouped``: the grouped kernels instead of the
    others (they take pycutlass_rt.grouped_gemm / moe_gemm problems only). ``op``: the
    GEMM kernels, or a convolution pass's ("fprop", "dgrad", "wgrad"; None: every pass).
    ``block_scaled``: False leaves out the kernels that take only block-scale grids
    (tests/gpu/test_block_scaled.py runs those), True keeps only them, None keeps both.
    ``depthwise``: likewise for the direct depthwise kernels, which run depthwise
    convolutions only (False: the others); ``direct`` for the direct grouped ones, which
    run grouped convolutions of their group width only.

    Under ``PYCUTLASS_RT_REQUIRE_GPU=1``, no GPU (rather than []) or a driver that cannot
    say whether a kernel runs fails the calling test (or the collection of its module).
    """
    import ctypes

    import pycutlass_rt as pcr

    reason = gpu_reason()
    if reason is not None:
        if require_gpu_mode():
            import pytest

            pytest.fail(f"{REQUIRE_GPU}=1, but {reason}", pytrace=False)
        return []
    lib, seen, out = pcr._lib.load(), set(), []
    for k in pcr.kernels():
        if k.grouped != grouped or (k.op != op if op else k.op == "gemm"):
            continue
        if block_scaled is not None and (k.scale_m != "none") != block_scaled:
            continue
        if depthwise is not None and (k.schedule == "depthwise") != depthwise:
            continue
        if direct is not None and (k.schedule == "direct") != direct:
            continue
        runs = ctypes.c_int32()
        st = lib.pcr_kernel_runs_on(k.index, 0, ctypes.byref(runs))
        if st != 0 and require_gpu_mode():
            import pytest

            pytest.fail(
                f"{REQUIRE_GPU}=1, but whether {k.name} runs on GPU 0 is unknown: {lib.error(st)}",
                pytrace=False,
            )
        if st != 0 or not runs.value:
            continue
        if kind is not None:
            if kind(k) in seen:
                continue
            seen.add(kind(k))
        out.append(k)
    return out


FLIP = {"t": "n", "n": "t"}


def canonical_layout(la, lb, ld="t"):
    """The kernel layout of a problem whose a, b, d are row- ('t') or column-major ('n'):
    a column-major d is computed as D^T = B^T A^T, which swaps and flips a's and b's."""
    return la + lb if ld == "t" else FLIP[lb] + FLIP[la]


def missing_kernel(
    dtype,
    out=None,
    layout=None,
    epilogue="linear",
    any_alignment=False,
    op="gemm",
    scales=None,
    depthwise=False,
):
    """None where this build holds a kernel that runs here for ``dtype`` inputs into
    ``out`` (default: ``dtype``), in the canonical ``layout`` ("tn", ...; None: any), with
    ``epilogue`` or one that computes it, and (``any_alignment``) reading operands of any
    alignment, for ``op`` (a GEMM, or a convolution pass: "fprop", "dgrad", "wgrad"),
    reading ``scales`` (None: any; else ``(scale_m, scale_n)``, ("groups", "blocks") for
    fp8 block scales), a direct depthwise fprop kernel where ``depthwise`` (else one of the
    others); else what is missing. Asks the kernel list only (nothing runs).

    ``dtype`` and ``out`` are library dtype names or torch dtypes.
    """
    name = lambda x: str(x).split(".")[-1]  # noqa: E731 - torch.float16 -> "float16"
    dtype, out = name(dtype), name(out or dtype)
    if layout is not None and (len(layout) != 2 or set(layout) - {"t", "n"}):
        raise ValueError(f"require: layout is two of 't'/'n', got {layout!r}")
    from pycutlass_rt._abi import Epilogue

    need = Epilogue.from_token(epilogue)
    for k in runnable_kernels(op=op, depthwise=depthwise):
        if (
            k.dtype_a == dtype
            and k.dtype_d == out
            and (layout is None or k.layout == layout)
            and epilogue_serves(Epilogue.from_token(k.epilogue), need)
            and (not any_alignment or max(k.align) == 1)
            and (scales is None or (k.scale_m, k.scale_n) == tuple(scales))
        ):
            return None
    where = f" in layout {layout}" if layout else ""
    where += " for operands of any alignment" if any_alignment else ""
    where += f" with {scales[0]}/{scales[1]} scales" if scales else ""
    what = epilogue if op == "gemm" else f"{epilogue} {'depthwise ' * depthwise}{op}"
    return f"no {what} kernel for {dtype} -> {out}{where} in this build runs here"


def epilogue_serves(kernel, problem) -> bool:
    """Whether a kernel of pcr_epilogue ``kernel`` computes a problem needing ``problem``:
    the library's rule (its own, and those it extends: every one extends LINEAR; SCALED
    and AUX extend BIASACT), for asking the kernel list without a GPU."""
    from pycutlass_rt._abi import Epilogue

    return (
        kernel == problem
        or problem == Epilogue.EPI_LINEAR
        or (problem == Epilogue.EPI_BIASACT and kernel != Epilogue.EPI_LINEAR)
    )


def require(
    dtype,
    out=None,
    layout=None,
    epilogue="linear",
    any_alignment=False,
    op="gemm",
    scales=None,
    depthwise=False,
):
    """Skips the calling GPU test unless this build holds a kernel that runs here for the
    problem :func:`missing_kernel` describes: tests ask the build what it holds before
    they run (development builds filter kernels), and never turn a call's refusal into a
    skip, so a refusal past this check fails the test.

    Skips only for what the build lacks (or holds for other GPUs only); without a GPU it
    skips too, but under ``PYCUTLASS_RT_REQUIRE_GPU=1`` that fails the test instead
    (:func:`runnable_kernels`).
    """
    missing = missing_kernel(dtype, out, layout, epilogue, any_alignment, op, scales, depthwise)
    if missing is not None:
        import pytest

        pytest.skip(missing)


def torch_dtype(name):
    """The torch dtype of a library dtype name ("tfloat32": float32 tensors, math="tf32")."""
    import torch

    return torch.float32 if name == "tfloat32" else getattr(torch, name)


def math_of(kernel):
    """The ``math=`` a kernel answers: "tf32" for TF32 kernels, "fast_accum" for fp8 kernels
    of the fast-accumulation schedules (which a call must allow), else None."""
    if kernel.dtype_a == "tfloat32":
        return "tf32"
    return "fast_accum" if kernel.schedule in ("coopfa", "pingpongfa") else None


def output_tolerance(out):
    """Relative error a torch dtype ``out``'s rounding allows on random inputs (0 for the
    exact integer outputs)."""
    import torch

    return {
        torch.float8_e4m3fn: 5e-2,  # 3 mantissa bits: rounding alone gives about 2.7e-2
        torch.float8_e5m2: 1e-1,
        torch.float16: 2e-3,
        torch.bfloat16: 1.6e-2,
        torch.float32: 1e-5,
        torch.float64: 1e-12,
    }.get(out, 0.0)


def tolerance(kernel, out):
    """Relative error allowed on random inputs for ``kernel`` writing torch dtype ``out``:
    the output's rounding, or the inputs' arithmetic where coarser (TF32's 10-bit
    mantissas; fp8 MMAs, which accumulate with fewer bits than fp32)."""
    tol = output_tolerance(out)
    if kernel.dtype_a == "tfloat32":
        tol = max(tol, 2e-3)
    if kernel.dtype_a.startswith("float8"):
        # fast accumulation adds the fp8 products into fp32 less often: coarser over long K
        fast = kernel.schedule in ("coopfa", "pingpongfa")
        tol = max(tol, 3e-3 if fast else 5e-4)
    return tol


def check(d, ref, what, tol=None):
    """``d`` was written everywhere (no NaN left of a NaN fill) and is within ``tol``
    (default: ``output_tolerance`` of its dtype) of the float64 ``ref``, relatively."""
    import torch

    assert not torch.isnan(d).any(), f"{what}: unwritten (NaN) elements"
    err = ((d.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert err <= (tol or output_tolerance(d.dtype)), f"{what}: relative error {err:.2e}"


def matrix(rows, cols, layout="t", dtype=None, *, integer=False, pad=0, offset=0):
    """A rows x cols torch CUDA matrix: row-major for layout 't', column-major for 'n'.

    Random in [-1, 1) (int8: in [-127, 127]), or integers in [-4, 4] (exact products);
    ``pad`` widens the leading
    dimension, ``offset`` shifts the start by that many elements.
    """
    import torch

    dtype = dtype or torch.bfloat16
    shape = (rows, cols + pad) if layout == "t" else (cols, rows + pad)
    size = shape[0] * shape[1] + offset
    if integer:
        flat = torch.randint(-4, 5, (size,), device="cuda").to(dtype)
    elif not dtype.is_floating_point:  # int8: the whole range
        flat = torch.randint(-127, 128, (size,), device="cuda").to(dtype)
    else:
        flat = (torch.rand(size, device="cuda") * 2 - 1).to(dtype)
    x = flat[offset:].view(shape)
    return x[:, :cols] if layout == "t" else x[:, :rows].t()


def empty(rows, cols, dtype=None):
    """A rows x cols torch CUDA output whose unwritten elements show: NaN (bfloat16 by
    default), or an unlikely integer (-77) for integer dtypes."""
    import torch

    dtype = dtype or torch.bfloat16
    fill = float("nan") if dtype.is_floating_point else -77
    return torch.full((rows, cols), fill, device="cuda", dtype=dtype)


def reference(a, b, c=None, alpha=1.0, beta=0.0, bias=None, activation=None):
    """``act(alpha * a @ b + beta * c + bias)`` in float64 (bias broadcasts as numpy does:
    (N,) per column, (M, 1) per row)."""

    ref = alpha * (a.double() @ b.double())
    if c is not None and beta != 0:
        ref = ref + beta * c.double()
    if bias is not None:
        ref = ref + bias.double()
    return {**torch_activations(), **parametrized_activations()}[activation](ref)


def torch_activations():
    """Each activation name pcr.gemm takes (None: none) -> torch's function of it: the
    tests' reference."""
    import torch

    f = torch.nn.functional
    return {
        None: lambda v: v,
        "relu": f.relu,
        "gelu": f.gelu,
        "gelu_tanh": lambda v: f.gelu(v, approximate="tanh"),
        "silu": f.silu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        # torch's own multiplies by 1/6 rounded to float32 (2.98e-8 off in float64)
        "hardswish": lambda v: v * (v + 3).clamp(0, 6) / 6,
        "leaky_relu": f.leaky_relu,
    }


def parametrized_activations():
    """pcr.gemm's activations with parameters, ``(name, *parameters)`` -> torch's function
    of them (the torch operators take names only)."""
    import torch

    return {
        ("leaky_relu", 0.2): lambda v: torch.nn.functional.leaky_relu(v, 0.2),
        ("clamp", -0.5, 0.75): lambda v: v.clamp(-0.5, 0.75),
    }


def reference_linear(in_features, out_features, activation):
    """``nn.Linear`` followed by torch's ``activation``: what the torch-op tests train
    pycutlass_rt.torch.Linear against."""
    import torch

    class RefLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(in_features, out_features)
            self.act = torch_activations()[activation]

        def forward(self, x):
            return self.act(self.lin(x))

    return RefLinear()


def hf_mlp(hidden, inter, fused):
    """A transformer MLP block as Hugging Face models write it, down(silu(gate(x)) * up(x)):
    on pycutlass_rt.torch.Linear with SiLU fused into gate's GEMM (``fused``), or on
    ``nn.Linear``. Both have the same state_dict keys."""
    import torch

    import pycutlass_rt.torch as pt

    f = torch.nn.functional

    class HFMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            lin = pt.Linear if fused else torch.nn.Linear
            extra = {"activation": "silu"} if fused else {}
            self.gate_proj = lin(hidden, inter, bias=False, **extra)
            self.up_proj = lin(hidden, inter, bias=False)
            self.down_proj = lin(inter, hidden, bias=False)

        def forward(self, x):
            gate = self.gate_proj(x) if fused else f.silu(self.gate_proj(x))
            return self.down_proj(gate * self.up_proj(x))

    return HFMLP()


# ---- depthwise convolutions: the cases the GPU suite and the CPU emulation share ------------


def depthwise_geometry(tile):
    """(filter (R, S), stride, dilation) a depthwise kernel of ``tile`` (its (R, S, stride),
    zeros for the generic kernel) takes: its own filter and stride, or for the generic one a
    filter, stride and dilation none other takes."""
    r, s, stride = tile
    if r == 0:
        return (5, 3), (2, 1), (2, 1)
    return (r, s), (stride, stride), (1, 1)


#: (n, c, h, w): one image, one output column, channels in several CTA chunks (960: four
#: chunks of 30 vectors; 1000: four, the last of 29), channels short of one chunk (8)
DEPTHWISE_SHAPES = [(1, 8, 5, 3), (2, 16, 9, 1), (1, 960, 7, 7), (3, 1000, 5, 9), (5, 40, 17, 23)]

#: (n, c, h, w, filter, stride, padding, dilation): MobileNet's 3x3 at both strides,
#: ConvNeXt's 7x7, 5x5 at stride 2 with a ragged edge, dilation, a stride that skips
#: inputs (3 > filter 2), channels in several chunks (960) and a single channel vector
DEPTHWISE_GRADIENT_CASES = [
    (2, 24, 13, 11, (3, 3), (1, 1), (1, 1), (1, 1)),
    (3, 16, 12, 9, (3, 3), (2, 2), (1, 1), (1, 1)),
    (1, 40, 14, 14, (7, 7), (1, 1), (3, 3), (1, 1)),
    (2, 8, 11, 13, (5, 5), (2, 2), (2, 1), (1, 1)),
    (1, 32, 15, 12, (3, 3), (1, 2), (2, 1), (2, 2)),
    (2, 8, 10, 10, (2, 2), (3, 3), (0, 0), (1, 1)),
    (1, 960, 6, 5, (3, 3), (1, 1), (1, 1), (1, 1)),
]


def depthwise_gradient_cases(tile):
    """The cases a depthwise gradient kernel of ``tile`` takes: all of
    :data:`DEPTHWISE_GRADIENT_CASES` for the generic ones; for one built for a filter and
    stride, that filter and stride at padding 0, "same" and the filter's extent less one
    (the most a stride-1 dgrad takes), over odd sizes (runs of outputs cut short at the
    right edge) and channel chunks, and a problem whose wgrad sums more slices than its
    second launch has warps."""
    if tuple(tile) == (0, 0, 0):
        return DEPTHWISE_GRADIENT_CASES
    r, s, stride = tile
    st = (stride, stride)
    return [
        (2, 24, 13, 11, (r, s), st, (0, 0), (1, 1)),
        (3, 16, 9, 14, (r, s), st, (r // 2, s // 2), (1, 1)),
        (1, 960, 8, 7, (r, s), st, (r - 1, s - 1), (1, 1)),
        (2, 8, 17, 22, (r, s), st, (r // 2, 0), (1, 1)),
        (4, 8, 32, 32, (r, s), st, (r // 2, s // 2), (1, 1)),
    ]
