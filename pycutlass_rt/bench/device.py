"""The array framework the benchmark makes tensors and times with: torch, else cupy.

Both adapters offer the same small surface (operands in a layout, events, graphs,
synchronization, a fp32 reference), so the rest of the benchmark never asks which one
it has.
"""
from __future__ import annotations

import contextlib
import subprocess

SMI_FIELDS = "clocks.sm,clocks.mem,power.draw,temperature.gpu"


def load(prefer: str | None = None):
    """The first usable framework adapter (``prefer``, else torch then cupy), or None and why."""
    reasons = []
    for name in ([prefer] if prefer else ["torch", "cupy"]):
        try:
            fw = {"torch": Torch, "cupy": Cupy}[name]()
        except Exception as e:  # noqa: BLE001 - absent, or present without CUDA
            reasons.append(f"{name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            continue
        return fw, None
    return None, "; ".join(reasons)


def nvidia_smi(fields: str = SMI_FIELDS) -> dict:
    """One nvidia-smi reading per GPU: ``{"raw": csv text, "gpus": [{field: value}]}``."""
    cmd = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return {"raw": "", "error": str(e), "gpus": []}
    return {"raw": out, "gpus": parse_smi_csv(out)}


def parse_smi_csv(text: str) -> list:
    """Rows of ``nvidia-smi --format=csv`` output as dicts keyed by the header names."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split(",")]
    return [dict(zip(header, (v.strip() for v in ln.split(",")))) for ln in lines[1:]]


class Torch:
    """torch on the current CUDA device."""

    name = "torch"

    def __init__(self):
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device")
        self.torch = torch
        self.version = torch.__version__

    def dtype(self, name: str):
        return getattr(self.torch, name)

    def operand(self, rows, cols, layout, dtype, pad=0, fill=True):
        """rows x cols in ``layout`` (t/n) with ``pad`` extra elements per leading dimension.

        Data are random uniform in [-1, 1) (integers in [-4, 4] for integer dtypes): never
        zeros, which run faster than real data on the H200.
        """
        t = self.torch
        outer, inner = (rows, cols) if layout == "t" else (cols, rows)
        dt = self.dtype(dtype)
        if not fill:
            x = t.empty(outer, inner + pad, device="cuda", dtype=dt)
        elif dt.is_floating_point:
            x = (t.rand(outer, inner + pad, device="cuda") * 2 - 1).to(dt)
        else:
            x = t.randint(-4, 5, (outer, inner + pad), device="cuda").to(dt)
        x = x[:, :inner]
        return x if layout == "t" else x.t()

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
        """Captures ``fn()`` into a CUDA graph; returns the replay callable."""
        t = self.torch
        side = t.cuda.Stream()
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(side):  # warm up on the capture stream (cuBLAS workspaces)
            fn()
        t.cuda.current_stream().wait_stream(side)
        g = t.cuda.CUDAGraph()
        with t.cuda.graph(g):
            fn()
        self.sync()
        return g.replay

    def stream_handle(self) -> int:
        return int(self.torch.cuda.current_stream().cuda_stream)

    def reference(self, a, b, c=None, alpha=1.0, beta=0.0):
        """``alpha * a @ b + beta * c`` in fp32 (no TF32)."""
        t = self.torch
        with _no_tf32(t):
            ref = t.matmul(a.float(), b.float())
        if alpha != 1.0:
            ref *= alpha
        if c is not None and beta:
            ref += beta * c.float()
        return ref

    def rel_err(self, got, ref) -> float:
        diff = (got.float() - ref).double().norm()
        return float(diff / max(float(ref.double().norm()), 1e-30))

    def is_finite(self, x) -> bool:
        return bool(self.torch.isfinite(x.float()).all())

    def device_info(self) -> dict:
        p = self.torch.cuda.get_device_properties(self.torch.cuda.current_device())
        return {"name": p.name, "sm_count": p.multi_processor_count,
                "cc": f"{p.major}.{p.minor}", "memory_bytes": p.total_memory,
                "l2_bytes": getattr(p, "L2_cache_size", None)}

    def free_memory(self):
        self.torch.cuda.empty_cache()

    def free_bytes(self) -> int:
        return int(self.torch.cuda.mem_get_info()[0])

    def versions(self) -> dict:
        return {"torch": self.version, "torch_cuda": self.torch.version.cuda}


@contextlib.contextmanager
def _no_tf32(torch):
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


class Cupy:
    """cupy on the current CUDA device (used where torch is absent)."""

    name = "cupy"

    def __init__(self):
        import cupy
        cupy.cuda.runtime.getDeviceCount()  # raises without a usable GPU
        self.cp = cupy
        self.version = cupy.__version__

    def dtype(self, name: str):
        import numpy as np
        if not hasattr(np, name):
            raise TypeError(f"cupy has no {name}")
        return np.dtype(name)

    def operand(self, rows, cols, layout, dtype, pad=0, fill=True):
        cp = self.cp
        outer, inner = (rows, cols) if layout == "t" else (cols, rows)
        dt = self.dtype(dtype)
        if not fill:
            x = cp.empty((outer, inner + pad), dt)
        elif dt.kind == "f":
            x = (cp.random.random((outer, inner + pad), dtype=cp.float32) * 2 - 1).astype(dt)
        else:
            x = cp.random.randint(-4, 5, (outer, inner + pad)).astype(dt)
        x = x[:, :inner]
        return x if layout == "t" else x.T

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
        cp = self.cp
        stream = cp.cuda.Stream(non_blocking=True)
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

    def reference(self, a, b, c=None, alpha=1.0, beta=0.0):
        cp = self.cp
        ref = cp.matmul(a.astype(cp.float32), b.astype(cp.float32))
        if alpha != 1.0:
            ref *= alpha
        if c is not None and beta:
            ref += beta * c.astype(cp.float32)
        return ref

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
        return {"name": name, "sm_count": p["multiProcessorCount"],
                "cc": f"{p['major']}.{p['minor']}", "memory_bytes": p["totalGlobalMem"],
                "l2_bytes": p.get("l2CacheSize")}

    def free_memory(self):
        self.cp.get_default_memory_pool().free_all_blocks()

    def free_bytes(self) -> int:
        pool = self.cp.get_default_memory_pool()  # cupy keeps freed blocks in its pool
        return int(self.cp.cuda.runtime.memGetInfo()[0] + pool.free_bytes())

    def versions(self) -> dict:
        return {"cupy": self.version}
