"""pycutlass_rt.torch's quantized pieces without a GPU: the quantize and block-scaled
scaled_mm operators (fake, CPU, opcheck, torch.compile) and QuantLinear in each checkpoint
format (its state_dict, loading a checkpoint's tensors as stored, accuracy against the
dequantized layer, refusals). The CUDA side: tests/gpu/test_torch_quantized_gpu.py."""

import logging
import re

import pytest

from pycutlass_rt import errors as pcr_errors

torch = pytest.importorskip("torch")
pt = pytest.importorskip("pycutlass_rt.torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.library import opcheck  # noqa: E402

ops = torch.ops.pycutlass_rt
E4M3, BF16 = torch.float8_e4m3fn, torch.bfloat16
NO_SCHEMA = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("gran", ["tensor", "token", "group", "block"])
@pytest.mark.parametrize("dtype", [E4M3, torch.int8])
def test_quantize_cpu_rounds_every_element_by_its_scale(gran, dtype):
    x = torch.randn(130, 300) * 5
    x[3] = 0  # an all-zero row keeps a tiny scale, not 0
    q, s = pt.quantize(x, dtype, gran)
    qmax = 448.0 if dtype == E4M3 else 127.0
    assert q.dtype == dtype and q.shape == x.shape
    deq = {
        "tensor": lambda: s.reshape(1, 1),
        "token": lambda: s,
        "group": lambda: s.repeat_interleave(128, 1)[:, :300],
        "block": lambda: s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:130, :300],
    }[gran]()
    err = (q.float() * deq - x).abs()
    if dtype == E4M3:  # half a unit of e4m3's 3-bit mantissa, or of its subnormals' step
        assert (err <= x.abs() * 2**-4 + deq * 2**-10 + 1e-12).all()
    else:
        assert (err <= deq * 0.5 * (1 + 1e-6)).all()
    assert q.float().abs().max() <= qmax and (s > 0).all()
    if gran == "group":
        assert s.stride() == (1, 130)  # M-major, as the kernels and torch._scaled_mm read it


def test_quantize_fake_has_the_real_strides():
    mode = FakeTensorMode()
    with mode:
        x = torch.empty(7, 5, 300, device="cuda", dtype=BF16)
        q, s = ops.quantize(x, E4M3, "group")
    assert q.shape == x.shape and q.dtype == E4M3
    assert s.shape == (7, 5, 3) and s.stride() == (5, 1, 35) and s.dtype == torch.float32
    real_q, real_s = pt.quantize(torch.randn(7, 5, 300), E4M3, "group")
    assert real_s.stride() == s.stride()


@pytest.mark.parametrize("gran", ["token", "group"])
def test_opcheck_quantize(gran):
    opcheck(ops.quantize.default, (torch.randn(9, 260), E4M3, gran), test_utils=NO_SCHEMA)


def test_quantize_errors():
    with pytest.raises(RuntimeError, match="granularity is one of"):
        pt.quantize(torch.randn(4, 8), E4M3, "row")
    with pytest.raises(RuntimeError, match="float8_e4m3fn or int8"):
        pt.quantize(torch.randn(4, 8), torch.float8_e5m2, "token")
    with pytest.raises(RuntimeError, match="'block' takes a 2-D x"):
        pt.quantize(torch.randn(2, 4, 8), E4M3, "block")
    with pytest.raises(NotImplementedError, match="no backward"):
        q, s = pt.quantize(torch.randn(4, 8, requires_grad=True), E4M3, "token")
        s.sum().backward()


def block_problem(m=70, n=300, k=500):
    x, w = torch.randn(m, k), torch.randn(n, k) / 20
    qx, sx = pt.quantize(x, E4M3, "group")
    qw, sw = pt.quantize(w, E4M3, "block")
    return x, w, qx, sx, qw, sw


def test_block_scaled_mm_is_the_blockwise_sum():
    x, w, qx, sx, qw, sw = block_problem()
    y = pt.scaled_mm(qx, qw.t(), sx, sw.t(), out_dtype=torch.float32)
    deq_x = qx.double() * sx.repeat_interleave(128, 1)[:, :500].double()
    deq_w = (
        qw.double() * sw.repeat_interleave(128, 0).repeat_interleave(128, 1)[:300, :500].double()
    )
    torch.testing.assert_close(y.double(), deq_x @ deq_w.t(), rtol=1e-5, atol=1e-5)
    bias = torch.randn(300, dtype=BF16)
    y2 = pt.scaled_mm(qx, qw.t(), sx, sw.t(), bias, BF16, "silu")
    torch.testing.assert_close(
        y2.double(),
        torch.nn.functional.silu(deq_x @ deq_w.t() + bias.double()),
        rtol=2e-2,
        atol=2e-2,
    )


def test_block_scale_shapes_are_checked():
    x, w, qx, sx, qw, sw = block_problem()
    with pytest.raises(RuntimeError, match="block scales"):
        pt.scaled_mm(qx, qw.t(), sx, sw[:, :3].t())
    with pytest.raises(RuntimeError, match="one value .per tensor."):
        pt.scaled_mm(qx, qw.t(), torch.ones(5, 1), torch.ones(1, 300))


def test_opcheck_block_scaled_mm():
    x, w, qx, sx, qw, sw = block_problem(8, 256, 384)
    opcheck(
        ops.scaled_mm.default,
        (qx, qw.t(), sx, sw.t(), None, BF16, "gelu"),
        test_utils=NO_SCHEMA,
    )


@pytest.mark.parametrize("strict", [False, True])
def test_scaled_mm_raises_each_refusal_and_never_falls_back(monkeypatch, caplog, strict):
    """scaled_mm (QuantLinear's GEMM) has no torch fallback: what the library refuses for
    one problem (here: over 64 rows; in strict mode, its missing tuned cache) raises
    UnsupportedError for that call alone, and the next problem runs on the library."""
    why = "PYCUTLASS_RT_STRICT=1 requires a tuned cache (test)" if strict else "too large (test)"
    if strict:
        monkeypatch.setenv("PYCUTLASS_RT_STRICT", "1")
    else:
        monkeypatch.delenv("PYCUTLASS_RT_STRICT", raising=False)
    calls = []

    def gemm(a, b, c, d, *, bias=None, scale_a=None, scale_b=None, activation=None, math=None):
        """pycutlass_rt.gemm emulated by the CPU operator, refusing problems of over 64 rows."""
        if a.shape[0] > 64:
            raise pcr_errors.UnsupportedError(why)
        calls.append(a.shape[0])
        return d.copy_(pt._cpu._scaled_mm_cpu(a, b, scale_a, scale_b, bias, d.dtype, activation))

    monkeypatch.setattr(pt._cuda, "_gemm", gemm)
    for m in (100, 8, 100, 8):
        x, w, qx, sx, qw, sw = block_problem(m, 256, 384)
        args = (qx, qw.t(), sx, sw.t(), None, BF16, "gelu")
        if m > 64:
            with pytest.raises(pcr_errors.UnsupportedError, match=re.escape(why)):
                pt._cuda._scaled_mm_cuda(*args)
        else:
            torch.testing.assert_close(
                pt._cuda._scaled_mm_cuda(*args), pt._cpu._scaled_mm_cpu(*args)
            )
    assert calls == [8, 8]
    assert not [
        r for r in caplog.records if r.name == "pycutlass_rt" and r.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize("fast", [False, True])
def test_use_fast_accum_reaches_the_library_as_its_math(monkeypatch, fast):
    """scaled_mm's use_fast_accum (torch._scaled_mm's) is the library's math="fast_accum";
    the fake implementation takes it too, so torch.compile traces it."""
    seen = []

    def gemm(a, b, c, d, *, math=None, **kw):
        seen.append(math)
        return d

    monkeypatch.setattr(pt._cuda, "_gemm", gemm)
    _, _, qx, sx, qw, sw = block_problem(8, 256, 384)
    pt._cuda._scaled_mm_cuda(qx, qw.t(), sx, sw.t(), None, BF16, None, fast)
    assert seen == ["fast_accum" if fast else None]
    real = (qx, qw.t(), sx, sw.t())
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in real]
        out = torch.ops.pycutlass_rt.scaled_mm(*fake, None, BF16, None, fast)
    assert out.shape == (8, 256) and out.dtype == BF16


@pytest.mark.parametrize("fmt", ["block_fp8", "fp8", "int8"])
def test_quant_linear_matches_its_dequantized_layer(fmt):
    lin = torch.nn.Linear(384, 260).to(BF16)
    q = pt.QuantLinear.from_linear(lin, fmt)
    x = torch.randn(3, 7, 384, dtype=BF16)
    y = q(x)
    assert y.shape == (3, 7, 260) and y.dtype == BF16
    ref = torch.nn.functional.linear(x.double(), q.dequantized_weight().double(), lin.bias.double())
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err < (0.06 if fmt != "int8" else 0.02), err  # the activations' rounding
    assert repr(q).startswith("QuantLinear(in_features=384, out_features=260, bias=True")


def test_quant_linear_loads_checkpoint_tensors_as_stored():
    """A DeepSeek-V3 layer's tensors (weight e4m3, weight_scale_inv (N/128, K/128)) and a
    compressed-tensors one's (weight_scale (N, 1), bf16 here) load by name."""
    q = pt.QuantLinear(512, 384, bias=False, format="block_fp8")
    w = (torch.randn(384, 512) * 100).to(E4M3)
    scale_inv = torch.rand(3, 4) / 100
    q.load_state_dict({"weight": w, "weight_scale_inv": scale_inv})
    assert torch.equal(q.weight.view(torch.uint8), w.view(torch.uint8))
    assert torch.equal(q.weight_scale_inv, scale_inv)
    c = pt.QuantLinear(512, 384, bias=True, format="fp8")
    c.load_state_dict(
        {"weight": w, "weight_scale": torch.rand(384, 1, dtype=BF16), "bias": torch.zeros(384)}
    )
    assert c.weight_scale.dtype == torch.float32
    with pytest.raises(ValueError, match="input_zero_point"):
        i8 = pt.QuantLinear(512, 384, format="int8")
        i8.load_state_dict(
            {
                "weight": torch.zeros(384, 512, dtype=torch.int8),
                "weight_scale": torch.ones(384, 1),
                "bias": torch.zeros(384),
                "input_zero_point": torch.zeros(1),
            }
        )


def test_replace_linear_quantizes_every_layer():
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 128))
    mlp = mlp.to(BF16)
    x = torch.randn(4, 256, dtype=BF16)
    ref = mlp(x)
    pt.replace_linear(mlp, quant="block_fp8")
    assert all(isinstance(mlp[i], pt.QuantLinear) for i in (0, 2))
    y = mlp(x)
    assert ((y.double() - ref.double()).norm() / ref.double().norm()) < 0.08
    with pytest.raises(ValueError, match="quant must be None or one of"):
        pt.replace_linear(torch.nn.Linear(4, 4), quant="nf4")


def test_quant_linear_compiles_in_one_graph():
    from torch._dynamo.testing import CompileCounterWithBackend

    layer = pt.QuantLinear.from_linear(torch.nn.Linear(256, 384).to(BF16), "block_fp8")
    counter = CompileCounterWithBackend("aot_eager")
    f = torch.compile(layer, backend=counter, fullgraph=True)
    x = torch.randn(5, 256, dtype=BF16)
    torch.testing.assert_close(f(x), layer(x))
    graph_ops = [n.target for g in counter.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert ops.quantize.default in graph_ops and ops.scaled_mm.default in graph_ops


@pytest.mark.parametrize("fast", [False, True])
def test_quant_linear_hands_fast_accum_to_its_gemm(monkeypatch, fast):
    seen = []

    def scaled_mm(*args):
        seen.append(args[7])
        return torch.zeros(args[0].shape[0], args[1].shape[1], dtype=args[5])

    monkeypatch.setattr(pt._quantized, "scaled_mm", scaled_mm)
    q = pt.QuantLinear(256, 64, format="fp8", fast_accum=fast)
    assert q(torch.randn(3, 256, dtype=BF16)).shape == (3, 64) and seen == [fast]
    assert ("fast_accum=True" in repr(q)) == fast
