"""The GPU suite's build queries (tests/helpers.py), exercised with a fake kernel list."""

import helpers
import pytest

from pycutlass_rt._kernels import KernelInfo


def kernel(dtype_a, dtype_d, layout, epilogue="linear", op="gemm", schedule="multistage"):
    return KernelInfo(
        0,
        "k",
        80,
        dtype_a,
        dtype_a,
        "float32",
        dtype_d,
        layout,
        (64, 64, 32),
        (1, 1, 1),
        (2, 2, 1),
        2,
        schedule,
        epilogue,
        "none",
        (8, 8, 8),
        op=op,
    )


@pytest.fixture
def build(monkeypatch):
    kernels = [
        kernel("bfloat16", "bfloat16", "tn"),
        kernel("float16", "float16", "tt", "biasact"),
        kernel("float16", "float16", "nhwc", "biasact", "fprop", "depthwise"),
    ]

    def runnable(op="gemm", depthwise=False):  # as the real one's: a pass's, depthwise or not
        return [k for k in kernels if k.op == op and (k.schedule == "depthwise") == depthwise]

    monkeypatch.setattr(helpers, "runnable_kernels", runnable)


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (("bfloat16",), {}),
        (("bfloat16", "bfloat16", "tn"), {}),
        (("float16",), {"layout": "tt", "epilogue": "biasact"}),
        (("float16",), {"layout": "tt"}),  # a fused kernel computes the plain epilogue too
        (("float16",), {"op": "fprop", "depthwise": True}),
    ],
)
def test_require_passes_when_the_build_holds_a_kernel(build, args, kwargs):
    helpers.require(*args, **kwargs)


@pytest.mark.parametrize(
    "args, kwargs, why",
    [
        (("bfloat16", "float32"), {}, "bfloat16 -> float32"),
        (("bfloat16",), {"layout": "tt"}, "in layout tt"),
        (("float16",), {"epilogue": "scaled"}, "no scaled kernel"),
        (("float32",), {}, "float32 -> float32"),
        # a depthwise kernel runs no other convolution
        (("float16",), {"op": "fprop"}, "no linear fprop kernel"),
        (("bfloat16",), {"op": "fprop", "depthwise": True}, "no linear depthwise fprop"),
    ],
)
def test_require_skips_with_the_reason_otherwise(build, args, kwargs, why):
    with pytest.raises(pytest.skip.Exception, match=why):
        helpers.require(*args, **kwargs)


def test_require_refuses_a_malformed_layout(build):
    with pytest.raises(ValueError, match="layout"):
        helpers.require("bfloat16", layout="row")


@pytest.mark.parametrize(
    "la, lb, ld, want", [("t", "n", "t", "tn"), ("t", "t", "n", "nn"), ("n", "t", "n", "nt")]
)
def test_canonical_layout_orients_d_row_major(la, lb, ld, want):
    assert helpers.canonical_layout(la, lb, ld) == want
