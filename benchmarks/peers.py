"""The libraries pycutlass_rt is compared with, behind one small interface.

Each peer's ``make(case, fw, bias)`` returns ``fn(a, b, c, d)`` computing the case's GEMM
into ``d`` (with ``bias`` and the activation of a ``bias_<act>`` epilogue), or raises
:class:`Unsupported` saying why it cannot. A peer that cannot even be
loaded says so in ``error`` and is reported, never fatal.

- cuBLAS through torch (``torch.mm(out=)``, ``torch.addmm`` for beta, ``torch._scaled_mm``
  for fp8, with the per-tensor scales pycutlass_rt gets too, ``torch._int_mm`` for int8);
  a bias + activation epilogue is torch's unfused
  sequence, ``torch.addmm(bias, a, b, out=d)`` then the activation in place on ``d``; a
  batch is ``torch.bmm(out=)``, a grouped (MoE) case a loop of ``torch.mm(out=)`` over the
  experts' rows;
- ``torch._grouped_mm`` for grouped cases, where torch has it;
- ``cupy.matmul`` where torch is absent;
- the CUTLASS Python interface (``cutlass_cppgen`` of the ``nvidia-cutlass`` wheel), whose
  compile time (first-call latency) is reported per kernel it builds.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import sys
import tempfile
import time
import types

from .shapes import DTYPES, bias_activation, expert_rows, keeps_pre_activation


class Unsupported(Exception):
    """A peer cannot run this case (the message says why)."""


def dequant_scales(case, fw) -> tuple:
    """The case dtype's per-tensor (scale_a, scale_b) as float32 GPU scalars, or ()."""
    return tuple(fw.ones(1, 1) * s for s in DTYPES[case.dtype].scales)


def expert_loop(mm, case):
    """A grouped (MoE) case the way a framework without grouped GEMMs runs it: one
    ``mm(x_rows, w[e], out=out_rows)`` per expert with rows, the slices known on the host."""
    rows = expert_rows(case.m, case.experts)

    def loop(x, w, offsets, out):
        start = 0
        for e, r in enumerate(rows):
            if r:
                mm(x[start : start + r], w[e], out=out[start : start + r])
            start += r

    return loop


class _Framework:
    """What the framework peers share: graph-capturable calls, nothing to drain."""

    graphable = True
    always_graph = False
    error = None
    drain = None
    via = ""

    def info(self) -> dict:
        return {"available": True, "via": self.via}


class TorchBlas(_Framework):
    """cuBLAS through torch."""

    name = "cublas"
    via = "torch.mm(out=) / torch.addmm(out=)"

    def make(self, case, fw, bias=None):
        t = fw.torch
        beta = case.beta
        act = bias_activation(case.epilogue)
        if case.experts:
            return expert_loop(t.mm, case)
        if case.batch > 1:
            if beta:
                raise Unsupported("batched with beta")
            return lambda a, b, c, d: t.bmm(a, b, out=d)
        if act and case.dtype == "int8" and act == "relu" and not beta:

            def int_mm_relu(a, b, c, d):  # exact in int32, as ours
                t._int_mm(a, b, out=d)
                d.add_(bias).relu_()

            return int_mm_relu
        if act and keeps_pre_activation(case.epilogue):
            if case.dtype not in ("bf16", "fp16") or beta:
                raise Unsupported(f"{case.epilogue} with {case.dtype}, beta={beta}")
            act_out = {  # z into y, out of place: z is kept (what autograd saves)
                "relu": lambda z, y: t.clamp_min(z, 0, out=y),
                "gelu": lambda z, y: t.ops.aten.gelu.out(z, out=y),
                "silu": lambda z, y: t.ops.aten.silu.out(z, out=y),
            }[act]

            def kept(a, b, c, d):
                t.addmm(bias, a, b, out=c)
                act_out(c, d)

            return kept
        if act:
            if case.dtype not in ("bf16", "fp16") or beta:
                raise Unsupported(f"{case.epilogue} with {case.dtype}, beta={beta}")
            act_ = {
                "relu": t.relu_,
                "gelu": lambda x: t._C._nn.gelu(x, out=x),
                "silu": lambda x: t.nn.functional.silu(x, inplace=True),
            }[act]

            def unfused(a, b, c, d):
                t.addmm(bias, a, b, out=d)
                act_(d)

            return unfused
        if case.dtype in ("bf16", "fp16"):
            if beta:
                return lambda a, b, c, d: t.addmm(c, a, b, beta=beta, out=d)
            return lambda a, b, c, d: t.mm(a, b, out=d)
        if beta:
            raise Unsupported(f"beta != 0 for {case.dtype}")
        if case.dtype in ("tf32", "fp32"):  # torch's TF32 switch, on or off for the call
            tf32 = case.dtype == "tf32"

            # torch >= 2.9's fp32_precision where present: once a program sets it, the
            # legacy allow_tf32 raises when read
            matmul = t.backends.cuda.matmul
            new_api = hasattr(matmul, "fp32_precision")
            name, value = (
                ("fp32_precision", "tf32" if tf32 else "ieee") if new_api else ("allow_tf32", tf32)
            )

            def mm32(a, b, c, d):
                old = getattr(matmul, name)
                setattr(matmul, name, value)
                try:
                    t.mm(a, b, out=d)
                finally:
                    setattr(matmul, name, old)

            return mm32
        if case.dtype == "fp8":
            sa, sb = dequant_scales(case, fw)
            return lambda a, b, c, d: t._scaled_mm(a, b, sa, sb, out_dtype=d.dtype, out=d)
        if case.dtype == "int8":
            return lambda a, b, c, d: t._int_mm(a, b, out=d)
        raise Unsupported(f"no torch operation for {case.dtype}")


class CupyBlas(_Framework):
    """cuBLAS through ``cupy.matmul`` (used where torch is absent)."""

    name = "cublas"
    via = "cupy.matmul(out=)"

    def make(self, case, fw, bias=None):
        cp = fw.cp
        if case.experts:
            return expert_loop(cp.matmul, case)
        if bias_activation(case.epilogue):
            raise Unsupported(f"epilogue {case.epilogue}: compared with torch only")
        if case.beta == 1.0:

            def fn(a, b, c, d):
                cp.matmul(a, b, out=d)
                cp.add(d, c, out=d)  # two kernels: cupy.matmul has no beta

            return fn
        if case.beta:
            raise Unsupported("beta other than 0 or 1")
        return lambda a, b, c, d: cp.matmul(a, b, out=d)


class TorchGroupedMM(_Framework):
    """``torch._grouped_mm`` (CUTLASS grouped kernels inside torch), for grouped cases."""

    name = "grouped_mm"
    via = "torch._grouped_mm(x, w, offs=ends)"

    def make(self, case, fw, bias=None):
        t = fw.torch
        if not case.experts:
            raise Unsupported("not a grouped case")
        if not hasattr(t, "_grouped_mm"):
            raise Unsupported("this torch has no _grouped_mm")
        # returns a new tensor (no out=): ours writes into out, torch allocates
        return lambda x, w, offsets, out: t._grouped_mm(x, w, offs=offsets)


def blas_peer(fw):
    """cuBLAS through the framework in use."""
    return TorchBlas() if fw.name == "torch" else CupyBlas()


def install_cuda_shim() -> str:
    """Makes ``cuda.cuda``, ``cuda.cudart`` and ``cuda.nvrtc`` importable.

    The CUTLASS Python interface imports those modules of cuda-python <= 12; from
    cuda-python 13 they live at ``cuda.bindings.driver``, ``.runtime`` and ``.nvrtc``.
    This inserts aliases into ``sys.modules`` (and ``cuda.__version__``) when the old
    names are missing; with an old cuda-python it changes nothing.

    Returns:
        ``"native"`` or a description of the shim installed.

    Raises:
        ImportError: neither layout of cuda-python is installed.
    """
    try:
        importlib.import_module("cuda.cuda")
        importlib.import_module("cuda.cudart")
        return "native"
    except Exception:  # noqa: BLE001 - absent (ImportError) or a stub that refuses
        pass
    import cuda

    bindings = importlib.import_module("cuda.bindings")
    version = getattr(bindings, "__version__", None) or _dist_version("cuda-bindings") or "0"
    for old, new in (("cuda", "driver"), ("cudart", "runtime"), ("nvrtc", "nvrtc")):
        try:
            target = importlib.import_module(f"cuda.bindings.{new}")
        except ImportError:
            continue
        alias = _alias_module(f"cuda.{old}", target)
        sys.modules[f"cuda.{old}"] = alias
        setattr(cuda, old, alias)
    if not hasattr(cuda, "__version__"):
        cuda.__version__ = version  # read by cutlass_cppgen's version checks
    return f"shim: cuda.cuda/cudart/nvrtc -> cuda.bindings {version}"


#: names cutlass_cppgen uses that newer bindings spell differently: old -> new
_RENAMED = {"CUstreamAttrID": "CUlaunchAttributeID", "cudaStreamAttrID": "cudaLaunchAttributeID"}


def _alias_module(name: str, target) -> types.ModuleType:
    mod = types.ModuleType(name, f"alias of {target.__name__} (benchmarks shim)")

    def __getattr__(attr):
        if not hasattr(target, attr) and attr in _RENAMED:
            return getattr(target, _RENAMED[attr])
        return getattr(target, attr)

    mod.__getattr__ = __getattr__  # PEP 562: the alias forwards everything to target
    return mod


def _dist_version(dist: str):
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001 - not installed
        return None


@contextlib.contextmanager
def _cwd(path):
    """cutlass_cppgen writes its sqlite kernel cache and error logs into the cwd."""
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _ensure_nvcc():
    """cutlass_cppgen runs ``nvcc`` from PATH; add the usual CUDA location if it is not."""
    if shutil.which("nvcc"):
        return
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    if os.path.exists(os.path.join(home, "bin", "nvcc")):
        os.environ["PATH"] = os.path.join(home, "bin") + os.pathsep + os.environ.get("PATH", "")


def _alignment(size: int, limit: int = 8) -> int:
    """The largest power of two <= limit dividing ``size`` (elements per access)."""
    a = limit
    while a > 1 and size % a:
        a //= 2
    return a


class CutlassPython:
    """The CUTLASS Python interface, precompiled per kernel, run with ``sync=False``.

    Its kernels are compiled with nvcc on first use (tens of seconds each) into a fresh
    cache directory, so the recorded first-call latency is the real compile time. Each
    ``run`` costs about a millisecond of host time (seen on an H200 host), more than the
    device time of most benchmark problems, so its device time is taken by graph replay
    whenever its launches can be captured; its host time is reported separately.
    """

    name = "cutlass"
    via = "cutlass_cppgen.op.Gemm(...).run(sync=False)"
    graphable = True
    always_graph = True

    def __init__(self):
        self.error = None
        self.shim = None
        self.version = None
        self.compile_s = {}  # kernel name -> first-call latency (s)
        self.failed = {}  # plan key -> why it could not be built
        self._plans = {}
        self._pending = []
        self._dir = tempfile.mkdtemp(prefix="pycutlass_rt-bench-cutlass-")
        try:
            self.shim = install_cuda_shim()
            _ensure_nvcc()
            with _cwd(self._dir):
                import cutlass_cppgen
            self.cutlass = cutlass_cppgen
            self.version = getattr(cutlass_cppgen, "__version__", None)
            self._stream_type = importlib.import_module("cuda.cuda").CUstream
        except Exception as e:  # noqa: BLE001 - reported, and the run goes on without it
            self.error = f"cannot load cutlass_cppgen: {type(e).__name__}: {e}"

    def drain(self):
        """Frees what the runs since the last synchronization allocated."""
        pending, self._pending = self._pending, []
        for args in pending:
            with contextlib.suppress(Exception):
                args.free()

    def _key(self, case):
        m, n, k = case.m, case.n, case.k
        al_a = _alignment(k if case.layout[0] == "t" else m)
        al_b = _alignment(n if case.layout[1] == "t" else k)
        return (case.dtype, case.layout, al_a, al_b, _alignment(n))

    def make(self, case, fw, bias=None):
        if self.error:
            raise Unsupported(self.error)
        lib = self.cutlass
        elements = {"bf16": lib.DataType.bf16, "fp16": lib.DataType.f16}
        if case.dtype not in elements:
            raise Unsupported(f"{case.dtype} is not benchmarked through this interface")
        if case.pad:
            raise Unsupported("padded leading dimensions: the interface derives them from shapes")
        if case.epilogue != "linear":
            raise Unsupported(f"epilogue {case.epilogue}")
        if case.batch > 1 or case.experts:
            raise Unsupported("batched and grouped cases: not compared through this interface")
        key = self._key(case)
        if key in self.failed:
            raise Unsupported(self.failed[key])
        plan = self._plans.get(key)
        if plan is None:
            lay = {"t": lib.LayoutType.RowMajor, "n": lib.LayoutType.ColumnMajor}
            plan = lib.op.Gemm(
                element=elements[case.dtype],
                layout_A=lay[case.layout[0]],
                layout_B=lay[case.layout[1]],
                layout_C=lib.LayoutType.RowMajor,
                element_accumulator=lib.DataType.f32,
            )
            self._plans[key] = plan
        stream_type, pending, beta = self._stream_type, self._pending, case.beta

        def fn(a, b, c, d):
            # the current stream is read per call, so graph capture sees its own stream
            pending.append(
                plan.run(
                    a,
                    b,
                    c if beta else d,
                    d,
                    alpha=1.0,
                    beta=beta,
                    sync=False,
                    stream=stream_type(fw.stream_handle()),
                )
            )

        return fn

    def first_call(self, case, fn, operands, fw) -> float:
        """Runs ``fn`` once, synchronized; its latency (s), compile included if new."""
        key = self._key(case)
        t0 = time.perf_counter()
        try:
            with _cwd(self._dir):
                fn(*operands)
                fw.sync()
        except Exception as e:
            self.failed[key] = f"{type(e).__name__}: {e}"
            raise
        finally:
            self.drain()
        elapsed = time.perf_counter() - t0
        op = getattr(self._plans.get(key), "operation", None)
        name = op.procedural_name() if op is not None else repr(key)
        self.compile_s.setdefault(name, elapsed)
        return elapsed

    def info(self) -> dict:
        out = {
            "available": self.error is None,
            "via": self.via,
            "version": self.version,
            "cuda_python": self.shim,
            "compile_s": dict(self.compile_s),
        }
        if self.error:
            out["reason"] = self.error
        if self.failed:
            out["failed"] = {" ".join(map(str, k)): v for k, v in self.failed.items()}
        return out

    def close(self):
        shutil.rmtree(self._dir, ignore_errors=True)
