"""Collection of the package's doctests: the modules of pycutlass_rt/torch/ import torch
(they register torch operators), so without a torch they can use (2.4 or later), as in
CI, that folder's doctests are not collected; its tests (tests/cpu/test_torch_ops.py,
tests/gpu/test_torch_ops_gpu.py) skip themselves there."""

import importlib.metadata
import importlib.util
import re


def _torch_usable() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return True  # a source build without metadata: let the import say
    major, minor = (int(x) for x in re.findall(r"\d+", version)[:2])
    return (major, minor) >= (2, 4)


collect_ignore = [] if _torch_usable() else ["pycutlass_rt/torch"]
