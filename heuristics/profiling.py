"""What a call launches on the GPU, from torch's profiler.

Shared by heuristics/peer_kernels.py (which cuBLAS kernels torch's call runs: their names
give tile, cluster and schedule) and benchmarks/conv.py (which kernels a convolution's
route runs); it lives here because ``benchmarks/`` imports from ``heuristics/`` and never
the reverse. torch is the caller's: nothing is imported here.
"""

from __future__ import annotations


def launches(torch, fn, calls: int = 3, width: int | None = 60) -> str:
    """The device kernels (and copies) ``fn()`` launches, from torch's profiler over
    ``calls`` calls: "name µs; ..." per call, largest first, so that a route's time can be
    told apart (the unfolding, the GEMM, a copy nobody asked for); names cut to ``width``
    characters (None: whole)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = e.device_time_total
        per[e.name] = per.get(e.name, 0.0) + us / calls
    top = sorted(per.items(), key=lambda kv: -kv[1])
    return "; ".join(f"{name[:width]} {us:.1f}" for name, us in top)
