"""Bound plans: one problem, its kernel chosen and its launch prepared, run many times."""

from __future__ import annotations

import ctypes
import functools
import weakref

from . import _call, _dlpack, _kernels, _lib
from ._abi import PCR_KERNEL_NONE
from .errors import InvalidArgumentError


class Gemm:
    """A bound GEMM plan: ``d = act(alpha * a @ b + beta * c + bias)`` prepared once,
    launched cheaply.

    Construction does everything :func:`pycutlass_rt.gemm` does per call: it validates the
    operands, chooses the kernel and builds the kernel's launch parameters (TMA
    descriptors included). Then:

    * ``plan.run()`` launches on the tensors given at construction: one C call, no
      argument parsing, so it is the cheapest way to repeat a GEMM; a problem that needs
      scratch (stream-K workspace, staged operands) gets it per run as
      :func:`pycutlass_rt.gemm` does (the stream's kept buffer; the graph's own under
      capture), so runs capture into CUDA graphs anywhere;
    * ``plan(a, b, c, d, bias=..., scale_a=..., scale_b=..., aux=..., amax=...)`` runs on other
      tensors that
      describe the same problem
      (shape, dtypes, layouts, alignment, device); the launch parameters are rebuilt only
      when the addresses change.

    The plan keeps references to the tensors it was built with and holds no GPU memory.
    Its runs may go to any stream, from one thread at a time (a run whose tensors or
    scratch moved rebuilds the launch parameters the plan keeps).

    Args:
        a, b, c, d, alpha, beta, bias, activation, scale_a, scale_b, math, aux, amax, scale_d: as for
            :func:`pycutlass_rt.gemm`; GPU tensors only.
        kernel: force a kernel by name instead of the selection.

    Raises:
        The errors of :func:`pycutlass_rt.gemm`; InvalidArgumentError for host arrays.

    Example (on a GPU):
        >>> import torch, pycutlass_rt as pcr
        >>> a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
        >>> d = torch.empty_like(a)
        >>> plan = pcr.Gemm(a, a, None, d)
        >>> plan.shape
        (64, 64, 64)
        >>> plan.run()  # d = a @ a on torch's current stream
        >>> d = plan(a, a.clone(), None, d)  # same problem, other tensors; returns d
        >>> with pcr.Gemm(a, a, None, d) as plan:  # closed when the block ends
        ...     plan.run()
    """

    _handle = None

    def __init__(
        self,
        a,
        b,
        c=None,
        d=None,
        alpha=1.0,
        beta=0.0,
        *,
        bias=None,
        activation=None,
        scale_a=None,
        scale_b=None,
        math=None,
        kernel=None,
        aux=None,
        amax=None,
        scale_d=None,
    ):
        if d is None:
            raise InvalidArgumentError("Gemm needs d, the output tensor")
        lib = self._lib = _lib.load()
        call = _call.prepare(
            a,
            b,
            c,
            d,
            alpha,
            beta,
            bias=bias,
            activation=activation,
            scale_a=scale_a,
            scale_b=scale_b,
            math=math,
            kernel=kernel,
            aux=aux,
            amax=amax,
            scale_d=scale_d,
        )
        # Python-number scales are folded into alpha here, and so in every run
        self.alpha, self.beta, self._act, self._math = (
            call.alpha,
            call.beta,
            call.activation,
            call.math,
        )
        objs, flags, keep = call.objs, call.flags, call.keep
        problem, handle = _lib.Problem(), ctypes.c_void_p()
        args = (
            *objs[:4],
            call.alpha,
            call.beta,
            call.extra,
            call.kernel,
            ctypes.byref(problem),
            ctypes.byref(handle),
        )
        lib.check(lib.pcr_py_plan_create(*args))
        _lib.note_cuda_used()
        self._handle = handle.value
        # Freed when the plan is collected, not at close(): a run in another thread may
        # hold the handle between its check and its C call (a plan is host memory only).
        weakref.finalize(self, lib.pcr_plan_destroy, self._handle)
        self._keep = (a, b, c, d, bias, scale_a, scale_b, aux, amax, scale_d, objs, keep)
        # Producers without the exchange API (cupy, numba) are asked for their current
        # stream in Python at each run; with it (torch), C asks the producer itself.
        self._stream_of = None if flags else (lambda: _dlpack._framework_stream(d) or 0)
        # run() with neither tensors nor stream, the hottest call: one argument, prebuilt
        self._launch = functools.partial(lib.plan_launch, self._handle) if flags else None
        index = ctypes.c_int32()
        lib.check(lib.pcr_plan_kernel(self._handle, ctypes.byref(index)))
        #: name of the kernel the plan launches (None: the problem has no GEMM work)
        self.kernel: str | None = (
            _kernels.kernels()[index.value].name if index.value != PCR_KERNEL_NONE else None
        )
        #: (M, N, K) of the problem as computed (after orienting d row-major)
        self.shape = (problem.m, problem.n, problem.k)

    def run(self, stream=None):
        """Launches the plan on its bound tensors.

        Args:
            stream: a CUDA stream or handle; default: the producer framework's current
                stream (read at each run, so graph capture sees its capture stream).
        """
        launch = self._launch
        if stream is None and launch is not None:
            st = launch()
        else:
            plan = self._handle
            if plan is None:
                raise InvalidArgumentError("this plan was closed")
            handle = self._stream_of() if stream is None else _dlpack.stream_handle(stream)
            st = self._lib.pcr_plan_run(plan, handle)
        if st:
            raise self._lib.error(st)

    def __call__(
        self,
        a,
        b,
        c,
        d,
        *,
        bias=None,
        scale_a=None,
        scale_b=None,
        aux=None,
        amax=None,
        scale_d=None,
        stream=None,
    ):
        """Runs the plan on other tensors of the same problem; returns ``d``.

        Tensor scales may change from run to run (same kinds: one value or a vector);
        Python-number scales were folded into alpha when the plan was built.
        """
        plan = self._handle
        if plan is None:
            raise InvalidArgumentError("this plan was closed")
        objs, handle, flags, keep = _call.operands(
            (a, b, c, d), stream, bias, scale_a, scale_b, aux, amax, scale_d
        )
        extra = _call.extras(objs, self._act, self._math)
        st = self._lib.plan_run(plan, *objs[:4], extra, flags, handle)
        if st:
            raise self._lib.error(st)
        del keep
        return d

    def close(self) -> None:
        """Ends the plan: later runs raise InvalidArgumentError. Its host memory goes when
        the object is collected (a run already under way in another thread finishes), and
        graphs that captured its runs stay valid (the plan holds no GPU memory)."""
        self._handle, self._launch = None, None

    def __enter__(self) -> Gemm:
        """``with pcr.Gemm(...) as plan:`` closes the plan when the block ends."""
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        m, n, k = self.shape
        return f"<pycutlass_rt.Gemm {m}x{n}x{k} kernel={self.kernel}>"
