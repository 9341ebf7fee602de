"""The framework adapters' shared logic on CPU: numpy stands in for torch and cupy."""

import sys

import numpy as np
import pytest

from pycutlass_rt import _backends, _tune, errors


class NumpyAdapter(_backends._Adapter):
    """numpy buffers, a call counter for 'events', eager 'graphs' that count captures."""

    def __init__(self):
        self.clock, self.captures = 0, 0

    def dtype(self, name):
        return np.dtype(name)

    def _buffer(self, size, dt, fill):
        if not fill:
            return np.empty(size, dt)
        return np.random.default_rng(0).uniform(-1, 1, size).astype(dt)

    def event(self):
        return [0]

    def record(self, event):
        event[0] = self.clock

    def elapsed_ms(self, start, end):
        return (end[0] - start[0]) * 1e-3  # one call = 1 us

    def capture(self, fn):
        self.captures += 1
        fn()
        return fn


def base_offset(x):
    root = x
    while root.base is not None:
        root = root.base
    return x.__array_interface__["data"][0] - root.__array_interface__["data"][0]


@pytest.mark.parametrize("layout", ["t", "n"])
def test_operand_layout_pad_and_offset(layout):
    x = NumpyAdapter().operand(3, 5, layout, "float16", 2, offset=1)
    assert x.shape == (3, 5) and base_offset(x) == 2  # one fp16 element past the base
    ld = (5 if layout == "t" else 3) + 2
    assert x.strides == ((ld * 2, 2) if layout == "t" else (2, ld * 2))
    assert np.all((x >= -1) & (x < 1)) and np.all(x != 0)
    plain = NumpyAdapter().operand(4, 6, layout, "float32", fill=False)
    assert plain.shape == (4, 6) and base_offset(plain) == 0
    assert plain.flags.c_contiguous if layout == "t" else plain.flags.f_contiguous


def test_loop_and_graph_timing():
    bk = NumpyAdapter()

    def fn():
        bk.clock += 1

    assert bk.loop_us(fn, 4) == pytest.approx(1.0)
    assert bk.graph_us(fn, 5, 3) == pytest.approx([1.0] * 3) and bk.captures == 1


def test_without_frameworks_load_says_why_and_tune_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    monkeypatch.setitem(sys.modules, "cupy", None)
    fw, why = _backends.load()
    assert fw is None and why.startswith("torch: ") and "; cupy: " in why
    assert _backends.load("cupy")[1].startswith("cupy: ")
    with pytest.raises(errors.NoDeviceError, match="neither is usable"):
        _tune.backend()
    assert _tune._Cupy is _backends.Cupy and _tune._Torch is _backends.Torch
