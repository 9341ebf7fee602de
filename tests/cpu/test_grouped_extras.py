"""The extras of grouped and MoE GEMMs on host arrays: which scale and bias layouts a MoE
layer takes, and the epilogues no grouped kernel has, all refused (or passed on) before
any device work. A layout that passes meets the GPU-only rule next (NoDeviceError
without a GPU, InvalidArgumentError on a GPU machine).
"""

import numpy as np
import pytest
from helpers import built_kernels

import pycutlass_rt as pcr

F16 = np.float16
T, E, K, N = 12, 4, 16, 8


def layer():
    """x (T, K), w (E, K, N) K-major, E ends, out (T, N) float16: host arrays."""
    rng = np.random.default_rng(0)
    x = rng.integers(-4, 5, (T, K)).astype(F16)
    w = rng.integers(-4, 5, (E, N, K)).astype(F16).transpose(0, 2, 1)
    return x, w, np.array([3, 3, 9, T], np.int32), np.zeros((T, N), F16)


# scale tensors dequantize fp8 MoE layers: torch's CPU fp8 tensors here (numpy has no
# fp8), which the front door takes once the build has an fp8 grouped kernel
needs_fp8_grouped = pytest.mark.skipif(
    not any(k.grouped and k.dtype_a == "float8_e4m3fn" for k in built_kernels()),
    reason="no fp8 grouped kernel in this build",
)


def fp8_layer():
    """layer()'s operands as torch CPU tensors: x and w in e4m3, out in bfloat16."""
    torch = pytest.importorskip("torch")
    x, w, ends, _ = layer()
    x8 = torch.from_numpy(x.astype(np.float32)).to(torch.float8_e4m3fn)
    w8 = torch.from_numpy(w.transpose(0, 2, 1).copy().astype(np.float32)).to(torch.float8_e4m3fn)
    out = torch.zeros(T, N, dtype=torch.bfloat16)
    return x8, w8.transpose(1, 2), torch.from_numpy(ends), out


def gpu_rule(has_gpu):
    """What a MoE call on host arrays that passed every other check raises."""
    if has_gpu:
        return pytest.raises(pcr.InvalidArgumentError, match="row-major GPU x and out")
    return pytest.raises(pcr.NoDeviceError)


def f32(*shape):
    return np.ones(shape, np.float32)


ACCEPTED_SCALE_B = [(), (1,), (E,), (E, 1), (E, 1, 1), (1, N), (E, N), (E, 1, N)]
ACCEPTED_BIAS = [(N,), (1, N), (E, N), (E, 1, N)]


@needs_fp8_grouped
@pytest.mark.parametrize("shape", ACCEPTED_SCALE_B)
def test_moe_scale_b_layouts_pass_to_the_gpu_rule(lib, has_gpu, shape):
    x, w, ends, out = fp8_layer()
    with gpu_rule(has_gpu):
        pcr.moe_gemm(x, w, ends, out, scale_a=f32(T), scale_b=f32(*shape))


@pytest.mark.skipif(
    not any(
        k.grouped and k.dtype_a == "float16" and k.epilogue != "linear" for k in built_kernels()
    ),
    reason="no float16 bias/activation grouped kernel in this build",
)
@pytest.mark.parametrize("shape", ACCEPTED_BIAS)
def test_moe_bias_layouts_pass_to_the_gpu_rule(lib, has_gpu, shape):
    x, w, ends, out = layer()
    with gpu_rule(has_gpu):
        pcr.moe_gemm(x, w, ends, out, bias=np.zeros(shape, F16), activation="silu")


@pytest.mark.parametrize("shape", [(E, N // 2), (E + 1,), (2, 1, N), (E, 2, N), (N, E)])
def test_moe_scale_b_layouts_refused(lib, shape):
    x, w, ends, out = layer()
    with pytest.raises(pcr.InvalidArgumentError, match=f"scale_b for {E} experts of {N} outputs"):
        pcr.moe_gemm(x, w, ends, out, scale_b=f32(*shape))


@pytest.mark.parametrize("shape", [(N + 1,), (E - 1, N), (E,), (E, 2, N)])
def test_moe_bias_layouts_refused(lib, shape):
    x, w, ends, out = layer()
    with pytest.raises(pcr.InvalidArgumentError, match=f"bias for {E} experts"):
        pcr.moe_gemm(x, w, ends, out, bias=np.zeros(shape, F16))


def test_moe_bias_dtype_is_checked_as_one_gemm(lib):
    """Expert 0's slices are validated as one GEMM's extras: the bias takes out's dtype."""
    x, w, ends, out = layer()
    with pytest.raises((pcr.UnsupportedError, pcr.DTypeError), match="bias"):
        pcr.moe_gemm(x, w, ends, out, bias=np.zeros((E, N), np.float32))


@needs_fp8_grouped
def test_moe_per_token_scales_are_checked_as_one_gemm(lib):
    x, w, ends, out = fp8_layer()
    with pytest.raises(pcr.InvalidArgumentError, match="scale_a"):
        pcr.moe_gemm(x, w, ends, out, scale_a=f32(T + 1))


def test_moe_refuses_extras_no_grouped_kernel_writes(lib):
    x, w, ends, out = layer()
    from pycutlass_rt import _call, _lib

    call = _call.prepare(x, w, ends, out, amax=f32(1))
    lib_ = _lib.load()
    status = lib_.pcr_py_moe_gemm(
        *call.objs[:4], 1.0, call.extra, -1, call.flags, call.handle, None
    )
    assert status != 0 and "writes no aux, amax or scale_d" in lib_.last_error()


def test_grouped_list_refuses_ragged_extras(lib):
    x, w, _, out = layer()
    a, b = x, w[0]
    with pytest.raises(
        pcr.InvalidArgumentError,
        match="As, Bs, Cs, Ds and bias need one entry per group; got 1, 1, 1, 1 and 2",
    ):
        pcr.grouped_gemm([a], [b], None, [out], bias=[None, None])
    with pytest.raises(pcr.InvalidArgumentError, match="number scales differ"):
        pcr.grouped_gemm([a, a], [b, b], None, [out, out.copy()], scale_a=[2.0, 3.0])
