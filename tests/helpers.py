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
