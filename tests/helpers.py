"""Helpers shared by the CPU and GPU test trees."""
import functools


@functools.lru_cache(maxsize=None)
def gpu_reason():
    """None when a GPU is usable, else why not."""
    import pycutlass_rt as pcr
    try:
        info = pcr.info()
    except pcr.LibraryError as e:
        return f"library not loadable: {e}"
    if not info["devices"]:
        return f"no usable GPU: {info['device_error']}"
    return None


def runnable_kernels(kind=None, grouped=False):
    """The build's kernels that run on GPU 0 ([] without a GPU), in registry order.

    ``kind``: a function of a KernelInfo; only the first kernel of each kind is kept
    (one per family and split, say). ``grouped``: the grouped kernels instead of the
    others (they take pycutlass_rt.grouped_gemm / moe_gemm problems only).
    """
    import ctypes

    import pycutlass_rt as pcr
    if gpu_reason() is not None:
        return []
    lib, seen, out = pcr._lib.load(), set(), []
    for k in pcr.kernels():
        if k.grouped != grouped:
            continue
        runs = ctypes.c_int32()
        if lib.pcr_kernel_runs_on(k.index, 0, ctypes.byref(runs)) != 0 or not runs.value:
            continue
        if kind is not None:
            if kind(k) in seen:
                continue
            seen.add(kind(k))
        out.append(k)
    return out


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
