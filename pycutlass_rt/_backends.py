"""The array frameworks operands are made and GEMMs timed with: torch, else cupy.

One adapter per framework, with the same small surface, so that its callers never ask
which one they have: ``tune()`` (and heuristics/sweep.py through it) and the benchmark
suite (``benchmarks/`` of a source checkout, which imports this module). An adapter makes
operands in a layout, with padded leading dimensions or a start past an aligned base;
records events; captures CUDA graphs; and, for the benchmark's correctness check,
computes an fp32 reference. torch and cupy are imported only when an adapter is made, so
importing this module costs nothing.
"""

from __future__ import annotations

from . import errors


def load(prefer: str | None = None):
    """The first usable adapter (``prefer``, else torch then cupy), or None and why.

    Args:
        prefer: "torch" or "cupy" to try only that one.

    Returns:
        ``(adapter, None)``, or ``(None, reason)`` naming why each framework is unusable.
    """
    reasons = []
    for name in [prefer] if prefer else ["torch", "cupy"]:
        try:
            fw = {"torch": Torch, "cupy": Cupy}[name]()
        except Exception as e:  # noqa: BLE001 - absent, or present without CUDA
            reasons.append(f"{name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            continue
        return fw, None
    return None, "; ".join(reasons)


class _Adapter:
    """What both adapters build on their own primitives: operand views and timing."""

    def operand(
        self,
        rows: int,
        cols: int,
        layout: str,
        dtype: str,
        pad: int = 0,
        *,
        offset: int = 0,
        fill: bool = True,
    ):
        """A rows x cols matrix, viewed in a fresh buffer of its own.

        Data are random uniform in [-1, 1) (integers in [-4, 4] for integer dtypes):
        never zeros, which run faster than real data on the H200.

        Args:
            rows, cols: the matrix's shape.
            layout: "t" row-major, "n" column-major.
            dtype: the framework's dtype name ("bfloat16", "float8_e4m3fn", "int8", ...).
            pad: extra elements per leading dimension.
            offset: elements by which the matrix starts past the buffer's (aligned)
                base: 0 < offset * itemsize < 16 makes a misaligned operand.
            fill: False leaves the buffer uninitialized (outputs).
        """
        outer, inner = (rows, cols) if layout == "t" else (cols, rows)
        flat = self._buffer(outer * (inner + pad) + offset, self.dtype(dtype), fill)
        x = flat[offset:].reshape(outer, inner + pad)[:, :inner]  # a view: the slice is dense
        return x if layout == "t" else x.T

    def elapsed_us(self, run) -> float:
        """Microseconds that ``run()``'s work takes on the current stream."""
        start, end = self.event(), self.event()
        self.record(start)
        run()
        self.record(end)
        return self.elapsed_ms(start, end) * 1e3

    def loop_us(self, fn, inner: int) -> float:
        """Microseconds per call of ``inner`` back-to-back ``fn()`` calls, host gaps included."""
        return self.elapsed_us(lambda: [fn() for _ in range(inner)]) / inner

    def graph_us(self, fn, inner: int, repeats: int) -> list[float]:
        """Microseconds per call in each of ``repeats`` replays of a graph of ``inner`` calls.

        Raises whatever capture raises where ``fn`` cannot be captured.
        """
        replay = self.capture(lambda: [fn() for _ in range(inner)])
        return [self.elapsed_us(replay) / inner for _ in range(repeats)]


class Torch(_Adapter):
    """torch on the current CUDA device."""

    name = "torch"

    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device")
        self.torch = torch
        self.version = torch.__version__

    def device(self, index: int):
        """A context in which ``index`` is the current CUDA device."""
        return self.torch.cuda.device(index)

    def dtype(self, name: str):
        return getattr(self.torch, name)

    def _buffer(self, size: int, dt, fill: bool):
        t = self.torch
        if not fill:
            return t.empty(size, device="cuda", dtype=dt)
        if dt.is_floating_point:  # drawn in fp32: uniform_ has no float8 kernel
            return t.empty(size, device="cuda", dtype=t.float32).uniform_(-1, 1).to(dt)
        return t.randint(-4, 5, (size,), device="cuda").to(dt)

    def sync(self):
        self.torch.cuda.synchronize()

    @staticmethod
    def poison(x):
        """Fills ``x`` with NaN (the largest value for integers): unwritten output shows."""
        x.fill_(float("nan") if x.dtype.is_floating_point else 127)

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    @staticmethod
    def record(event):
        event.record()

    @staticmethod
    def elapsed_ms(start, end) -> float:
        end.synchronize()
        return start.elapsed_time(end)

    def capture(self, fn):
        """Captures ``fn()`` into a CUDA graph; returns the replay callable.

        ``fn`` runs once first on the capture stream itself: workspaces kept per stream
        (cuBLAS's, this library's) grow there outside capture, where allocating is allowed.
        """
        t = self.torch
        stream = t.cuda.Stream()
        stream.wait_stream(t.cuda.current_stream())  # the operands are ready
        with t.cuda.stream(stream):
            fn()
        g = t.cuda.CUDAGraph()
        with t.cuda.graph(g, stream=stream):
            fn()
        self.sync()
        return g.replay

    def stream_handle(self) -> int:
        return int(self.torch.cuda.current_stream().cuda_stream)

    def reference(self, a, b, c=None, alpha=1.0, beta=0.0, bias=None, activation=None):
        """``act(alpha * a @ b + beta * c + bias)`` in fp32, the product computed in float64
        (never on TF32, whatever torch's settings, which the library does not touch)."""
        t = self.torch
        ref = t.matmul(a.double(), b.double()).float()
        if alpha != 1.0:
            ref *= alpha
        if c is not None and beta:
            ref += beta * c.float()
        if bias is not None:
            ref += bias.float()
        if activation:
            F = t.nn.functional
            ref = {
                "relu": F.relu,
                "gelu": F.gelu,
                "silu": F.silu,
                "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
                "sigmoid": t.sigmoid,
                "tanh": t.tanh,
                "hardswish": F.hardswish,
                "leaky_relu": F.leaky_relu,
            }[activation](ref)
        return ref

    def int_vector(self, values):
        """An int32 GPU vector (offsets)."""
        return self.torch.tensor(values, dtype=self.torch.int32, device="cuda")

    def ones(self, rows: int, cols: int):
        """A float32 GPU matrix of ones (scales)."""
        return self.torch.ones((rows, cols), dtype=self.torch.float32, device="cuda")

    def rel_err(self, got, ref) -> float:
        diff = (got.float() - ref).double().norm()
        return float(diff / max(float(ref.double().norm()), 1e-30))

    def is_finite(self, x) -> bool:
        return bool(self.torch.isfinite(x.float()).all())

    def device_info(self) -> dict:
        p = self.torch.cuda.get_device_properties(self.torch.cuda.current_device())
        return {
            "name": p.name,
            "sm_count": p.multi_processor_count,
            "cc": f"{p.major}.{p.minor}",
            "memory_bytes": p.total_memory,
            "l2_bytes": getattr(p, "L2_cache_size", None),
        }

    def free_memory(self):
        self.torch.cuda.empty_cache()

    def memory_gib(self) -> dict:
        """GiB of the current GPU: free, reserved by torch's allocator, and held by
        anything else (other libraries' pools, CUDA graphs' memory, contexts)."""
        free, total = self.torch.cuda.mem_get_info()
        return _memory_split(free, total, self.torch.cuda.memory_reserved())

    def free_bytes(self) -> int:
        return int(self.torch.cuda.mem_get_info()[0])

    def versions(self) -> dict:
        return {"torch": self.version, "torch_cuda": self.torch.version.cuda}


def _memory_split(free: int, total: int, framework: int) -> dict:
    """free / framework / other GiB of a device's ``total`` bytes.

    >>> _memory_split(100 << 30, 140 << 30, 30 << 30)
    {'free': 100.0, 'framework': 30.0, 'other': 10.0}
    """
    gib = 1 << 30
    other = max(total - free - framework, 0)
    return {
        "free": round(free / gib, 2),
        "framework": round(framework / gib, 2),
        "other": round(other / gib, 2),
    }


class Cupy(_Adapter):
    """cupy on the current CUDA device (used where torch is absent)."""

    name = "cupy"

    def __init__(self):
        import cupy

        cupy.cuda.runtime.getDeviceCount()  # raises without a usable GPU
        self.cp = cupy
        self.version = cupy.__version__

    def device(self, index: int):
        """A context in which ``index`` is the current CUDA device."""
        return self.cp.cuda.Device(index)

    def dtype(self, name: str):
        """numpy's dtype of that name; DTypeError (a TypeError) for those numpy lacks."""
        import numpy as np

        if not hasattr(np, name):  # bfloat16, float8_*: torch has them, cupy does not
            raise errors.DTypeError(
                f"cupy has no {name} dtype here: install torch for {name} operands"
            )
        return np.dtype(name)

    def _buffer(self, size: int, dt, fill: bool):
        cp = self.cp
        if not fill:
            return cp.empty(size, dt)
        if dt.kind == "f":
            return cp.random.uniform(-1, 1, size, dtype=cp.float32).astype(dt)
        return cp.random.randint(-4, 5, size).astype(dt)

    def sync(self):
        self.cp.cuda.runtime.deviceSynchronize()

    @staticmethod
    def poison(x):
        x.fill(float("nan") if x.dtype.kind == "f" else 127)

    def event(self):
        return self.cp.cuda.Event()

    def record(self, event):
        event.record(self.cp.cuda.get_current_stream())

    def elapsed_ms(self, start, end) -> float:
        end.synchronize()
        return self.cp.cuda.get_elapsed_time(start, end)

    def capture(self, fn):
        """Captures ``fn()`` into a CUDA graph; returns a callable replaying it on the
        current stream. ``fn`` runs once first on the capture stream (see Torch.capture)."""
        cp = self.cp
        stream = cp.cuda.Stream(non_blocking=True)
        # non-blocking: it does not wait for the legacy default stream by itself
        stream.wait_event(cp.cuda.get_current_stream().record())  # the operands are ready
        with stream:
            fn()
            stream.begin_capture()
            try:
                fn()
            finally:
                graph = stream.end_capture()
        self.sync()

        def replay():
            graph.launch(stream=cp.cuda.get_current_stream())

        return replay

    def stream_handle(self) -> int:
        return int(self.cp.cuda.get_current_stream().ptr)

    def reference(self, a, b, c=None, alpha=1.0, beta=0.0, bias=None, activation=None):
        """``act(alpha * a @ b + beta * c + bias)`` in fp32."""
        cp = self.cp
        ref = cp.matmul(a.astype(cp.float32), b.astype(cp.float32))
        if alpha != 1.0:
            ref *= alpha
        if c is not None and beta:
            ref += beta * c.astype(cp.float32)
        if bias is not None:
            ref += bias.astype(cp.float32)
        if activation == "relu":
            ref = cp.maximum(ref, 0)
        elif activation == "silu":
            ref = ref / (1 + cp.exp(-ref))
        elif activation == "sigmoid":
            ref = 1 / (1 + cp.exp(-ref))
        elif activation == "tanh":
            ref = cp.tanh(ref)
        elif activation == "hardswish":
            ref = ref * cp.clip(ref + 3, 0, 6) / 6
        elif activation == "leaky_relu":
            ref = cp.where(ref >= 0, ref, 0.01 * ref)
        elif activation in ("gelu", "gelu_tanh"):
            if activation == "gelu":
                from cupyx.scipy.special import erf

                inner = erf(ref * 0.7071067811865476)
            else:
                inner = cp.tanh(0.7978845608028654 * (ref + 0.044715 * ref**3))
            ref = 0.5 * ref * (1 + inner)
        return ref

    def int_vector(self, values):
        """An int32 GPU vector (offsets)."""
        return self.cp.asarray(values, dtype=self.cp.int32)

    def ones(self, rows: int, cols: int):
        """A float32 GPU matrix of ones (scales)."""
        return self.cp.ones((rows, cols), dtype=self.cp.float32)

    def rel_err(self, got, ref) -> float:
        cp = self.cp
        diff = cp.linalg.norm((got.astype(cp.float32) - ref).astype(cp.float64))
        return float(diff / max(float(cp.linalg.norm(ref.astype(cp.float64))), 1e-30))

    def is_finite(self, x) -> bool:
        return bool(self.cp.isfinite(x).all())

    def device_info(self) -> dict:
        cp = self.cp
        dev = cp.cuda.Device()
        p = cp.cuda.runtime.getDeviceProperties(dev.id)
        name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
        return {
            "name": name,
            "sm_count": p["multiProcessorCount"],
            "cc": f"{p['major']}.{p['minor']}",
            "memory_bytes": p["totalGlobalMem"],
            "l2_bytes": p.get("l2CacheSize"),
        }

    def free_memory(self):
        self.cp.get_default_memory_pool().free_all_blocks()

    def memory_gib(self) -> dict:
        """GiB of the current GPU: free, held by cupy's pool, and held by anything else."""
        free, total = self.cp.cuda.runtime.memGetInfo()
        return _memory_split(free, total, self.cp.get_default_memory_pool().total_bytes())

    def free_bytes(self) -> int:
        pool = self.cp.get_default_memory_pool()  # cupy keeps freed blocks in its pool
        return int(self.cp.cuda.runtime.memGetInfo()[0] + pool.free_bytes())

    def versions(self) -> dict:
        return {"cupy": self.version}
