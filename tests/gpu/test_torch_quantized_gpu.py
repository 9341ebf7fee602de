"""pycutlass_rt.torch's quantized path on the GPU: QuantLinear in each checkpoint format
against its dequantized layer and against the CPU operators, and under
torch.compile(fullgraph=True, mode="reduce-overhead")."""

import pytest
from helpers import runnable_kernels

torch = pytest.importorskip("torch")
pt = pytest.importorskip("pycutlass_rt.torch")

BF16 = torch.bfloat16


def needs(fmt):
    """Skips unless the build has a kernel that runs here for the format's GEMM."""
    want = {
        "block_fp8": lambda k: k.scale_m == "groups" and k.scale_n == "blocks",
        "fp8": lambda k: k.dtype_a == "float8_e4m3fn" and k.epilogue == "scaled",
        "int8": lambda k: k.dtype_a == "int8" and k.epilogue == "scaled",
    }[fmt]
    if not any(want(k) and k.dtype_d == "bfloat16" for k in runnable_kernels(block_scaled=None)):
        pytest.skip(f"no kernel for QuantLinear({fmt!r}) in this build runs here")


@pytest.mark.parametrize("fmt", ["block_fp8", "fp8", "int8"])
@pytest.mark.parametrize("m", [1, 37, 512])
def test_quant_linear_against_its_dequantized_layer_and_the_cpu_ops(fmt, m):
    needs(fmt)
    lin = torch.nn.Linear(2048, 1536).to("cuda", BF16)
    q = pt.QuantLinear.from_linear(lin, fmt)
    x = torch.randn(m, 2048, device="cuda", dtype=BF16)
    y = q(x)
    ref = torch.nn.functional.linear(x.double(), q.dequantized_weight().double(), lin.bias.double())
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err < (0.06 if fmt != "int8" else 0.02), err
    # the CPU operators compute the same quantization: the results agree to bf16 rounding
    y_cpu = q.to("cpu")(x.cpu())
    torch.testing.assert_close(y.cpu().float(), y_cpu.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("fmt", ["block_fp8", "fp8"])
def test_quant_linear_under_compile_reduce_overhead(fmt):
    needs(fmt)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(1024, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 1024)
    ).to("cuda", BF16)
    pt.replace_linear(mlp, quant=fmt)
    f = torch.compile(mlp, fullgraph=True, mode="reduce-overhead")
    for m in (8, 8, 8, 64):
        x = torch.randn(m, 1024, device="cuda", dtype=BF16)
        torch.testing.assert_close(f(x).float(), mlp(x).float(), rtol=1e-2, atol=1e-2)
