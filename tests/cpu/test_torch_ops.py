"""pycutlass_rt.torch without a GPU: schemas, fake (meta) implementations on concrete and
symbolic sizes, errors, autograd formulas, Linear and replace_linear.

The operators' CPU kernels are torch's own operators (the library has no CPU kernels), so
everything here runs with no library loaded: opcheck, gradcheck and torch.compile (the
aot_eager backend) exercise the registrations, the fake implementations and the backward
formulas that the GPU runs with pycutlass_rt's kernels (tests/gpu/test_torch_ops_gpu.py).
Skipped where torch is not installed (CI).
"""

import functools
import logging
import os
import subprocess
import sys
import types

import catalog  # native/catalog/: tests/conftest.py puts native/ on sys.path
import pytest
from helpers import hf_mlp, reference_linear, torch_activations

from pycutlass_rt import errors as pcr_errors

torch = pytest.importorskip("torch")
pt = pytest.importorskip("pycutlass_rt.torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.library import opcheck  # noqa: E402

ops = torch.ops.pycutlass_rt
F = torch.nn.functional
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_ACT = torch_activations()
ACTS = tuple(TORCH_ACT)
BF16, F64 = torch.bfloat16, torch.float64
NO_SCHEMA = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def run(code, **env):
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env},
    )


def test_importing_the_package_never_imports_torch():
    r = run("import sys, pycutlass_rt; print('torch' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_registering_the_ops_needs_no_library():
    """Schemas, fakes, CPU kernels and autograd register with no library to load."""
    r = run(
        "import torch, pycutlass_rt.torch as pt, pycutlass_rt._lib as L\n"
        "x = torch.randn(3, 4, requires_grad=True)\n"
        "pt.linear(x, torch.randn(5, 4), None, 'gelu').sum().backward()\n"
        "print(L.loaded is None, tuple(x.grad.shape))",
        PYCUTLASS_RT_LIBRARY="/nonexistent/libpycutlass_rt.so",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True (3, 4)"


def test_schemas():
    schemas = {
        ops.mm.default: "pycutlass_rt::mm(Tensor a, Tensor b) -> Tensor",
        ops.mm.out: "pycutlass_rt::mm.out(Tensor a, Tensor b, *, Tensor(a!) out) -> ()",
        ops.linear.default: "pycutlass_rt::linear(Tensor x, Tensor w, Tensor? bias=None, "
        "str? activation=None) -> Tensor",
        ops.scaled_mm.default: "pycutlass_rt::scaled_mm(Tensor a, Tensor b, Tensor scale_a, "
        "Tensor scale_b, Tensor? bias=None, ScalarType? out_dtype=None, str? activation=None, "
        "bool use_fast_accum=False) -> Tensor",
        ops.quantize.default: "pycutlass_rt::quantize(Tensor x, ScalarType dtype, "
        "str granularity) -> (Tensor, Tensor)",
        ops.grouped_mm.default: "pycutlass_rt::grouped_mm(Tensor x, Tensor w, Tensor offs) "
        "-> Tensor",
    }
    for op, schema in schemas.items():
        assert str(op._schema) == schema
    assert pt.ACTIVATIONS == (
        "relu",
        "gelu",
        "gelu_tanh",
        "silu",
        "sigmoid",
        "tanh",
        "hardswish",
        "leaky_relu",
    )
    assert set(pt.ACTIVATIONS) == set(TORCH_ACT) - {None}  # the tests' reference covers all


# ---- fake implementations: shapes, dtypes, errors ---------------------------------------


def fake_cuda(*specs):
    """Fake CUDA tensors (no GPU needed) of (shape, dtype) specs, and the mode they live in."""
    mode = FakeTensorMode()
    with mode:
        return mode, [torch.empty(s, dtype=d, device="cuda") for s, d in specs]


@pytest.mark.parametrize(
    "xshape, out",
    [((8, 64), (8, 32)), ((2, 5, 64), (2, 5, 32)), ((64,), (32,)), ((0, 64), (0, 32))],
)
@pytest.mark.parametrize("act", ACTS)
def test_fake_linear(xshape, out, act):
    mode, (x, w, b) = fake_cuda((xshape, BF16), ((32, 64), BF16), ((32,), BF16))
    with mode:
        y = ops.linear(x, w, b, act)
    assert y.shape == out and y.dtype == BF16 and y.device.type == "cuda"
    assert y.is_contiguous()


def test_fake_mm_and_out():
    mode, (a, b, o) = fake_cuda(((7, 5), BF16), ((5, 3), BF16), ((7, 3), torch.float32))
    with mode:
        y = ops.mm(a, b)
        ops.mm.out(a, b, out=o)  # float32 out of bfloat16 inputs
        assert pt.mm(a, b, out=o) is o
    assert y.shape == (7, 3) and y.dtype == BF16


@pytest.mark.parametrize(
    "dtype, out_dtype, want",
    [
        ("float8_e4m3fn", None, BF16),
        ("float8_e4m3fn", torch.float16, torch.float16),
        ("float8_e5m2", torch.float32, torch.float32),
        ("int8", torch.int8, torch.int8),
        ("int8", None, BF16),
    ],
)
def test_fake_scaled_mm(dtype, out_dtype, want):
    dt = getattr(torch, dtype)
    mode, (a, w, sa, sb) = fake_cuda(
        ((16, 64), dt), ((32, 64), dt), ((16, 1), torch.float32), ((), torch.float32)
    )
    with mode:
        y = ops.scaled_mm(a, w.t(), sa, sb, None, out_dtype)
    assert y.shape == (16, 32) and y.dtype == want


def test_fake_grouped_mm():
    mode, (x, w, offs) = fake_cuda(((100, 64), BF16), ((4, 64, 32), BF16), ((4,), torch.int32))
    with mode:
        y = ops.grouped_mm(x, w, offs)
    assert y.shape == (100, 32) and y.dtype == BF16


def test_meta_tensors():
    m = lambda *s, dtype=BF16: torch.empty(s, device="meta", dtype=dtype)  # noqa: E731
    assert ops.mm(m(4, 6), m(6, 2)).shape == (4, 2)
    assert ops.linear(m(3, 4, 6), m(2, 6), m(2), "silu").shape == (3, 4, 2)
    e4m3 = torch.float8_e4m3fn
    y = ops.scaled_mm(
        m(4, 16, dtype=e4m3),
        m(16, 8, dtype=e4m3),
        m(dtype=torch.float32),
        m(1, 8, dtype=torch.float32),
    )
    assert y.shape == (4, 8) and y.dtype == BF16
    assert ops.grouped_mm(m(9, 6), m(3, 6, 5), m(3, dtype=torch.int32)).shape == (9, 5)


BAD = [
    ("mm", lambda f: ops.mm(f(4, 6), f(5, 2)), RuntimeError, "cannot be multiplied"),
    ("mm 3-D", lambda f: ops.mm(f(2, 4, 6), f(6, 2)), RuntimeError, "must be matrices"),
    ("mm dtypes", lambda f: ops.mm(f(4, 6), f(6, 2, dtype=F64)), RuntimeError, "one dtype"),
    (
        "mm int8",
        lambda f: ops.mm(f(4, 6, dtype=torch.int8), f(6, 2, dtype=torch.int8)),
        RuntimeError,
        "scaled_mm",
    ),
    (
        "mm.out shape",
        lambda f: ops.mm.out(f(4, 6), f(6, 2), out=f(4, 3)),
        RuntimeError,
        "out must be 4x2",
    ),
    (
        "mm.out dtype",
        lambda f: ops.mm.out(f(4, 6), f(6, 2), out=f(4, 2, dtype=F64)),
        RuntimeError,
        "out of torch.bfloat16 inputs",
    ),
    ("linear K", lambda f: ops.linear(f(3, 6), f(2, 5)), RuntimeError, "6 features"),
    (
        "linear bias",
        lambda f: ops.linear(f(3, 6), f(2, 6), f(3)),
        RuntimeError,
        "bias must be a vector of 2",
    ),
    (
        "linear bias dtype",
        lambda f: ops.linear(f(3, 6), f(2, 6), f(2, dtype=F64)),
        RuntimeError,
        "bias must be torch.bfloat16",
    ),
    (
        "linear activation",
        lambda f: ops.linear(f(3, 6), f(2, 6), None, "softplus"),
        ValueError,
        "activation must be None or one of",
    ),
    (
        "scaled_mm dtype",
        lambda f: ops.scaled_mm(
            f(4, 16), f(16, 8), f(1, dtype=torch.float32), f(1, dtype=torch.float32)
        ),
        RuntimeError,
        "float8_e4m3fn, float8_e5m2 or int8",
    ),
    (
        "scaled_mm scale",
        lambda f: ops.scaled_mm(
            f(4, 16, dtype=torch.int8),
            f(16, 8, dtype=torch.int8),
            f(3, dtype=torch.float32),
            f(1, dtype=torch.float32),
        ),
        RuntimeError,
        "scale_a holds one value",
    ),
    (
        "scaled_mm scale dtype",
        lambda f: ops.scaled_mm(
            f(4, 16, dtype=torch.int8), f(16, 8, dtype=torch.int8), f(1), f(1, dtype=torch.float32)
        ),
        RuntimeError,
        "scale_a must be float32",
    ),
    (
        "scaled_mm out",
        lambda f: ops.scaled_mm(
            f(4, 16, dtype=torch.int8),
            f(16, 8, dtype=torch.int8),
            f(1, dtype=torch.float32),
            f(1, dtype=torch.float32),
            None,
            torch.float32,
        ),
        RuntimeError,
        "out_dtype of torch.int8",
    ),
    (
        "grouped offs",
        lambda f: ops.grouped_mm(f(9, 6), f(3, 6, 5), f(4, dtype=torch.int32)),
        RuntimeError,
        "one end offset per expert",
    ),
    (
        "grouped K",
        lambda f: ops.grouped_mm(f(9, 7), f(3, 6, 5), f(3, dtype=torch.int32)),
        RuntimeError,
        "x has K = 7",
    ),
    (
        "grouped dtype",
        lambda f: ops.grouped_mm(
            f(9, 6, dtype=F64), f(3, 6, 5, dtype=F64), f(3, dtype=torch.int32)
        ),
        RuntimeError,
        "float16 or bfloat16",
    ),
]


@pytest.mark.parametrize("where", ["fake", "meta", "cpu"])
@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_arguments_raise_the_same_error_everywhere(case, where):
    """The fake implementations (torch.compile's view) and the kernels' own checks agree."""
    _, call, error, match = case
    if where == "fake":
        mode = FakeTensorMode()
        make = lambda *s, dtype=BF16: torch.empty(s, device="cuda", dtype=dtype)  # noqa: E731
    else:
        mode = torch.no_grad()  # no mode: the meta and CPU kernels run as they are
        device = "meta" if where == "meta" else "cpu"
        make = lambda *s, dtype=BF16: torch.zeros(s, device=device, dtype=dtype)  # noqa: E731
    with mode, pytest.raises(error, match=match):
        call(make)


def test_devices_must_match():
    mode = FakeTensorMode()
    with mode:
        a = torch.empty(4, 6, device="cuda", dtype=BF16)
        b = torch.empty(6, 2, device="cpu", dtype=BF16)
        with pytest.raises(RuntimeError, match="tensors on cuda:0 and cpu"):
            ops.mm(a, b)


# ---- symbolic sizes: torch.compile(dynamic=True) traces each op once ---------------------


def compiled(fn, dynamic=True):
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("aot_eager")
    return torch.compile(fn, backend=counter, fullgraph=True, dynamic=dynamic), counter


CASES = {
    "mm": (lambda m: (torch.randn(m, 24, dtype=F64), torch.randn(24, m + 3, dtype=F64)), pt.mm),
    "linear": (
        lambda m: (torch.randn(2, m, 24), torch.randn(m + 3, 24), torch.randn(m + 3), "gelu"),
        pt.linear,
    ),
    "scaled_mm": (
        lambda m: (
            torch.randn(m, 32).to(torch.float8_e4m3fn),
            torch.randn(m + 3, 32).to(torch.float8_e4m3fn).t(),
            torch.rand(m, 1),
            torch.rand(1, m + 3),
        ),
        pt.scaled_mm,
    ),
    "grouped_mm": (
        lambda m: (
            torch.randn(3 * m, 16, dtype=BF16),
            torch.randn(3, 16, m + 3, dtype=BF16),
            torch.tensor([m, m, 3 * m], dtype=torch.int32),
        ),
        pt.grouped_mm,
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_dynamic_shapes_trace_once(name):
    make, fn = CASES[name]
    f, counter = compiled(fn)
    for m in (5, 8, 13):
        args = make(m)
        torch.testing.assert_close(f(*args), fn(*args))
    assert counter.frame_count == 1, "recompiled for a new size"


def test_out_variant_under_compile():
    f, counter = compiled(lambda a, b, out: pt.mm(a, b, out=out))
    for m in (4, 9, 17):
        a, b, out = torch.randn(m, 6), torch.randn(6, 3), torch.empty(m, 3)
        assert f(a, b, out) is out
        torch.testing.assert_close(out, a @ b)
    assert counter.frame_count == 1


def test_make_fx_symbolic_graph_holds_the_op():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, w, b):
        return ops.linear(x, w, b, "silu")

    gm = make_fx(f, tracing_mode="symbolic")(
        torch.randn(2, 5, 7), torch.randn(4, 7), torch.randn(4)
    )
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls] == [ops.linear.default]
    assert any(isinstance(s, torch.SymInt) for s in calls[0].meta["val"].shape)


# ---- opcheck and autograd on the CPU kernels ---------------------------------------------


def f64(*shape, grad=True):
    return torch.randn(shape, dtype=F64, requires_grad=grad)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("bias", [False, True])
def test_opcheck_linear(act, bias):
    opcheck(ops.linear.default, (f64(3, 5, 7), f64(4, 7), f64(4) if bias else None, act))


def test_opcheck_others():
    opcheck(ops.mm.default, (f64(5, 7), f64(7, 3)))
    opcheck(ops._grad_mm.default, (f64(5, 7), f64(7, 3)))
    opcheck(
        ops.mm.out, (f64(5, 7, grad=False), f64(7, 3, grad=False)), {"out": f64(5, 3, grad=False)}
    )
    i8 = torch.randint(-127, 128, (6, 32), dtype=torch.int8)
    w8 = torch.randint(-127, 128, (8, 32), dtype=torch.int8)
    opcheck(ops.scaled_mm.default, (i8, w8.t(), torch.rand(6, 1), torch.rand(1, 8), None, BF16))
    # float8: all but the schema check, whose mutation test (allclose) has no float8 kernel
    e4m3 = torch.float8_e4m3fn
    a, w = torch.randn(6, 32).to(e4m3), torch.randn(8, 32).to(e4m3)
    args = (a, w.t(), torch.rand(6, 1), torch.rand(1, 8), None, BF16)
    opcheck(ops.scaled_mm.default, args, test_utils=NO_SCHEMA)
    x, wg = torch.randn(10, 16, dtype=BF16, requires_grad=True), torch.randn(3, 16, 4, dtype=BF16)
    opcheck(ops.grouped_mm.default, (x, wg, torch.tensor([3, 3, 10], dtype=torch.int32)))


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("how", ["op", "linear"])
def test_gradcheck_linear(act, how):
    """op: the operator's own backward (the pre-activation recomputed); linear: the Python
    function, which keeps the pre-activation when a gradient is needed."""
    fn = ops.linear if how == "op" else pt.linear
    torch.manual_seed(0)
    x, w, b = f64(2, 3, 6), f64(5, 6), f64(5)
    assert torch.autograd.gradcheck(lambda x, w, b: fn(x, w, b, act), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: fn(x, w, None, act), (f64(4, 6), w))


def test_gradcheck_mm_and_double_backward():
    a, b = f64(5, 7), f64(7, 3)
    assert torch.autograd.gradcheck(ops.mm, (a, b))
    assert torch.autograd.gradgradcheck(ops.mm, (a, b))


def test_gradcheck_grouped_mm_x():
    x, w = f64(12, 6), torch.randn(3, 6, 4, dtype=F64)
    offs = torch.tensor([4, 4, 10], dtype=torch.int32)  # an empty expert, rows 10.. uncovered

    def fn(x):
        return ops.grouped_mm(x.to(BF16), w.to(BF16), offs).to(F64)

    y = fn(x)
    y.backward(torch.ones_like(y))
    want = torch.zeros(12, 6, dtype=F64)
    want[:4] = w[0].to(BF16).to(F64).sum(1)
    want[4:10] = w[2].to(BF16).to(F64).sum(1)
    torch.testing.assert_close(x.grad, want, rtol=1e-2, atol=1e-2)
    with pytest.raises(NotImplementedError, match="no gradient for w"):
        wg = w.to(BF16).requires_grad_()
        ops.grouped_mm(x.detach().to(BF16), wg, offs).sum().backward()


def test_linear_keeps_the_pre_activation_only_when_a_gradient_is_needed():
    x, w = f64(3, 6), f64(5, 6)
    y = pt.linear(x, w, None, "silu")
    assert y.grad_fn.name() == "SiluBackward0"  # torch's silu on the kept pre-activation
    for act in ("relu", "sigmoid", "tanh"):  # gradients from the output: stays fused
        assert pt.linear(x, w, None, act).grad_fn.name().startswith("GeneratedBackwardFor")
    assert pt.linear(x, w, None, "hardswish").grad_fn.name() == "HardswishBackward0"
    with torch.no_grad():
        assert pt.linear(x, w, None, "silu").grad_fn is None


def test_out_variant_refuses_autograd_and_bumps_the_version():
    a, b, out = f64(4, 5), f64(5, 2, grad=False), torch.empty(4, 2, dtype=F64)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        pt.mm(a, b, out=out)
    version = out._version
    pt.mm(a.detach(), b, out=out)
    assert out._version > version
    torch.testing.assert_close(out, a.detach() @ b)


def test_scaled_mm_has_no_backward():
    e4m3 = torch.float8_e4m3fn
    a, w = torch.randn(6, 32).to(e4m3), torch.randn(8, 32).to(e4m3)
    bias = torch.randn(8, dtype=BF16, requires_grad=True)
    y = pt.scaled_mm(a, w.t(), torch.rand(()), torch.rand(()), bias)
    with pytest.raises(NotImplementedError, match="scaled_mm has no backward"):
        y.float().sum().backward()


def test_cpu_kernels_match_torch():
    a, w = torch.randn(6, 32), torch.randn(8, 32)
    sa, sw = torch.rand(6, 1), torch.rand(1, 8)
    q = lambda t: t.to(torch.float8_e4m3fn)  # noqa: E731
    want = (q(a).double() * sa) @ (q(w).double().t() * sw)
    got = pt.scaled_mm(q(a), q(w).t(), sa, sw, out_dtype=torch.float32)
    torch.testing.assert_close(got, want.float())
    x, wg = torch.randn(10, 16), torch.randn(3, 16, 4)
    got = pt.grouped_mm(x.to(BF16), wg.to(BF16), torch.tensor([3, 3, 8], dtype=torch.int32))
    want = torch.cat([x[:3] @ wg[0], x[3:8] @ wg[2], torch.zeros(2, 4)]).to(BF16)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


# ---- Linear and replace_linear ------------------------------------------------------------


def test_linear_state_dict_is_nn_linears():
    for bias in (True, False):
        ref = torch.nn.Linear(16, 8, bias=bias)
        lin = pt.Linear(16, 8, bias=bias, activation="gelu")
        assert list(lin.state_dict()) == list(ref.state_dict())
        lin.load_state_dict(ref.state_dict())
        ref.load_state_dict(lin.state_dict())
        assert [p.shape for p in lin.parameters()] == [p.shape for p in ref.parameters()]
    assert isinstance(lin, torch.nn.Linear)
    with pytest.raises(ValueError, match="activation must be"):
        pt.Linear(4, 4, activation="softplus")


@pytest.mark.parametrize("act", ACTS)
def test_linear_forward_and_backward_match_nn_linear(act):
    torch.manual_seed(1)
    ref = torch.nn.Linear(12, 7).double()
    lin = pt.Linear.from_linear(ref, activation=act)
    assert lin.weight is ref.weight and lin.bias is ref.bias
    x = f64(3, 4, 12)
    y, want = lin(x), TORCH_ACT[act](ref(x))
    torch.testing.assert_close(y, want)
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, lin.weight, lin.bias), g)
    exp = torch.autograd.grad(want, (x, ref.weight, ref.bias), g)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b)


def test_from_linear_without_bias_and_mode():
    ref = torch.nn.Linear(4, 3, bias=False).eval()
    lin = pt.Linear.from_linear(ref)
    assert lin.bias is None and not lin.training and list(lin.state_dict()) == ["weight"]
    with pytest.raises(TypeError, match="nn.Linear"):
        pt.Linear.from_linear(torch.nn.Conv1d(1, 1, 1))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 16)
        self.inner = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
        self.attn = torch.nn.MultiheadAttention(16, 2)  # out_proj: an nn.Linear subclass
        self.tied = self.proj  # one module at two places

    def forward(self, x):
        return self.inner(self.proj(x))


def test_replace_linear_swaps_in_place():
    torch.manual_seed(0)
    model = Block()
    keys = list(model.state_dict())
    params = {n: p for n, p in model.named_parameters()}
    x = torch.randn(5, 8)
    want = model(x)
    assert pt.replace_linear(model) is model
    assert type(model.proj) is pt.Linear and type(model.inner[0]) is pt.Linear
    assert model.tied is model.proj
    assert type(model.attn.out_proj) is not pt.Linear  # a subclass, used by its weights
    assert list(model.state_dict()) == keys
    assert all(p is params[n] for n, p in model.named_parameters())
    torch.testing.assert_close(model(x), want)
    assert pt.replace_linear(model) is model  # a second pass has nothing left to swap


def test_replace_linear_activations():
    seq = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    pt.replace_linear(seq, activation={"0": "silu", "1": "relu"})
    assert [m.activation for m in seq] == ["silu", "relu", None]
    seq = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    assert [m.activation for m in pt.replace_linear(seq, activation="gelu")] == ["gelu"] * 2
    with pytest.raises(ValueError, match="'2' name no nn.Linear"):
        pt.replace_linear(torch.nn.Sequential(torch.nn.Linear(4, 4)), activation={"2": "relu"})
    with pytest.raises(ValueError, match="activation must be"):
        pt.replace_linear(torch.nn.Sequential(torch.nn.Linear(4, 4)), activation="softplus")
    root = torch.nn.Linear(4, 4)
    swapped = pt.replace_linear(root, activation="relu")
    assert type(swapped) is pt.Linear and swapped.weight is root.weight


# ---- training and torch.compile ------------------------------------------------------------


def mlp(make, act):
    torch.manual_seed(0)
    layers = [make(16, 32, act), make(32, 4, None)]
    return torch.nn.Sequential(*layers).double()


def train(model, steps=8):
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(64, 16, dtype=F64), torch.randn(64, 4, dtype=F64)) for _ in range(steps)]
    losses = []
    for x, y in data:
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("act", ["relu", "gelu", "silu", "tanh"])
def test_mlp_trains_like_nn_linear(act):
    ours = train(mlp(lambda i, o, act: pt.Linear(i, o, activation=act), act))
    ref = train(mlp(reference_linear, act))
    assert ours[-1] < ours[0]
    torch.testing.assert_close(ours, ref, rtol=1e-9, atol=1e-12)


def test_hf_mlp_block_compiles_without_graph_breaks():
    torch.manual_seed(0)
    block = hf_mlp(32, 64, fused=True).double()
    ref = hf_mlp(32, 64, fused=False).double()
    ref.load_state_dict(block.state_dict())
    f, counter = compiled(block)
    for m in (3, 7, 11):
        x = f64(2, m, 32)
        y = f(x)
        torch.testing.assert_close(y, ref(x))
        torch.testing.assert_close(y, block(x))
        g = torch.autograd.grad(y.sum(), block.gate_proj.weight)[0]
        torch.testing.assert_close(g, torch.autograd.grad(ref(x).sum(), ref.gate_proj.weight)[0])
    assert counter.frame_count == 1
    ops_in_graph = [
        n.target for g in counter.graphs for n in g.graph.nodes if n.op == "call_function"
    ]
    assert ops.linear.default in ops_in_graph


# ---- the CUDA kernels' own code, on an emulated library ------------------------------------

#: the catalogue's dtype words (native/catalog/kernel.py) -> the dtype names that
#: pycutlass_rt.kernels() gives
CATALOG_DTYPES = {
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "tf32": "tfloat32",
    "f64": "float64",
    "s8": "int8",
    "s32": "int32",
    "e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
}
GEMM_LAYOUTS = ("tn", "nn", "nt", "tt")


@functools.cache
def default_build():
    """The default build's kernels (the default tier, native/catalog/tiers.py), with the
    fields of pycutlass_rt.kernels()' records that say what a kernel takes."""
    return catalogue_records(lambda k: k.default)


def catalogue_records(wanted):
    """The catalogue's kernels ``wanted(kernel)`` is true of, as default_build() gives them."""
    return tuple(
        types.SimpleNamespace(
            index=i,
            name=k.name,
            op=k.op,
            dtype_a=CATALOG_DTYPES[k.a],
            dtype_d=CATALOG_DTYPES[k.d],
            layout=k.layout,
            schedule=k.schedule,
            epilogue=k.epilogue,
            grouped=k.grouped,
            scale_m="groups" if k.block else "none",
        )
        for i, k in enumerate(k for k in catalog.catalogue() if wanted(k))
    )


def kernel_dtype(dtype, math=None):
    """The kernels' name of a torch dtype under ``math`` (float32 on TF32: "tfloat32")."""
    name = str(dtype).split(".")[-1]
    return "tfloat32" if name == "float32" and math == "tf32" else name


class Build:
    """The kernels of the emulated library: what the emulations run and refuse, and the
    kernel list the operators' fallback decisions read (pycutlass_rt.torch._fallback). The
    default build's, less what a test drops; strict mode off, no fallback taken yet."""

    def __init__(self, monkeypatch):
        self.kernels = list(default_build())
        monkeypatch.setattr(pt._fallback, "_kernel_list", lambda: self.kernels)
        monkeypatch.setattr(pt._fallback, "_COVERED", {})
        for taken in ("_TORCH_MM", "_UNFUSED", "_TORCH_CONV"):
            monkeypatch.setattr(pt._cuda, taken, set())
        monkeypatch.delenv("PYCUTLASS_RT_STRICT", raising=False)

    def drop(self, unwanted):
        """A build without the kernels ``unwanted(kernel)`` is true of."""
        self.kernels = [k for k in self.kernels if not unwanted(k)]
        pt._fallback._COVERED.clear()

    def add(self, wanted):
        """A build that also holds the catalogue's kernels ``wanted(kernel)`` is true of
        (those of the extended tier, as a kernel filter builds them)."""
        held = {k.name for k in self.kernels}
        extra = [k for k in catalogue_records(wanted) if k.name not in held]
        self.kernels += [
            types.SimpleNamespace(**{**vars(k), "index": len(held) + i})
            for i, k in enumerate(extra)
        ]
        pt._fallback._COVERED.clear()

    def has(self, op, dtype, out, layouts, fused=False, depthwise=False):
        """Whether a kernel of ``op`` takes ``dtype`` inputs to ``out`` in one of
        ``layouts``, with a bias/activation epilogue where ``fused`` (the library's screen);
        a direct depthwise one where ``depthwise``, else one of the others (not the direct
        grouped ones: a grouped fprop they take here runs as GEMMs, its result the same)."""
        return any(
            k.op == op
            and (k.schedule == "depthwise") == depthwise
            and k.schedule != "direct"
            and k.dtype_a == dtype
            and k.dtype_d == out
            and k.layout in layouts
            and not k.grouped
            and k.scale_m == "none"
            and (not fused or k.epilogue != "linear")
            for k in self.kernels
        )


def fallbacks(caplog):
    """The fallback records the operators logged (pycutlass_rt's logger, WARNING)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "pycutlass_rt" and r.levelno == logging.WARNING
    ]


class Library:
    """pycutlass_rt.gemm and moe_gemm as torch on the CPU, with the library's rules that
    the CUDA kernels depend on: operands row- or column-major (the layout rule of
    native/src/problem.cpp), a kernel of ``build`` for the dtypes, layout and epilogue (or
    UnsupportedError, as the library's screen), c broadcast views read, offsets as E end
    offsets. ``refuse(a, b, d)`` may refuse one problem (a message: UnsupportedError)."""

    def __init__(self, monkeypatch, build=None, refuse=None):
        self.calls = []
        self.build = build or Build(monkeypatch)
        self.refuse = refuse
        monkeypatch.setattr(pt._cuda, "_gemm", self.gemm)
        monkeypatch.setattr(pt._cuda, "_moe_gemm", self.moe_gemm)

    @staticmethod
    def layout(t, name):
        (r, c), (s0, s1) = t.shape, t.stride()
        if (s1 == 1 or c <= 1) and (r == 1 or s0 >= max(c, 1)):
            return "t"
        if (s0 == 1 or r <= 1) and (c == 1 or s1 >= max(r, 1)):
            return "n"
        raise pcr_errors.InvalidArgumentError(f"{name} is neither row- nor column-major")

    def gemm(
        self,
        a,
        b,
        c,
        d,
        alpha=1.0,
        beta=0.0,
        *,
        bias=None,
        activation=None,
        scale_a=None,
        scale_b=None,
        math=None,
    ):
        assert not (a.requires_grad or b.requires_grad), "exported a tensor that needs grad"
        layout = self.layout(a, "a") + self.layout(b, "b")
        fused = bias is not None or activation is not None
        dtype, out = kernel_dtype(a.dtype, math), kernel_dtype(d.dtype)
        if not self.build.has("gemm", dtype, out, (layout,), fused and scale_a is None):
            raise pcr_errors.UnsupportedError(f"no {dtype} {layout} kernel (emulated build)")
        why = self.refuse and self.refuse(a, b, d)
        if why:
            raise pcr_errors.UnsupportedError(why)
        self.calls.append((layout, fused))
        r = a.double() @ b.double()
        if scale_a is not None:
            r = r * scale_a.double().reshape(-1, 1)
        if scale_b is not None:
            r = r * scale_b.double().reshape(1, -1)
        r = alpha * r + (beta * c.double() if c is not None else 0)
        if bias is not None:
            r = r + bias.double()
        d.copy_(TORCH_ACT[activation](r))
        return d

    def moe_gemm(self, x, w, offs, out):
        assert x.stride(1) == 1 and offs.shape[0] == w.shape[0]
        start = 0
        for e, end in enumerate(offs.tolist()):
            out[start:end] = (x[start:end].double() @ w[e].double()).to(out.dtype)
            start = end
        return out


@pytest.mark.parametrize("dtype", [BF16, torch.float32, F64])
@pytest.mark.parametrize("act", ACTS)
def test_cuda_linear_on_an_emulated_library(monkeypatch, caplog, dtype, act):
    """The fused call: the default build has bias/activation kernels for every float dtype
    (float32 and float64 included)."""
    lib = Library(monkeypatch)
    x, w, b = torch.randn(2, 3, 16, dtype=dtype), torch.randn(8, 16, dtype=dtype), torch.randn(8)
    b = b.to(dtype)
    want = TORCH_ACT[act](F.linear(x.double(), w.double(), b.double()))
    for _ in range(2):
        y = pt._cuda._linear_cuda(x, w.requires_grad_(), b, act)
        torch.testing.assert_close(y.double(), want, rtol=1e-2, atol=1e-2)
        assert y.shape == (2, 3, 8)
    assert lib.calls == [("tn", True)] * 2
    assert not pt._cuda._UNFUSED and not fallbacks(caplog)
    y = pt._cuda._linear_cuda(x[..., ::2], w[:, ::2].detach(), None, None)  # steps: copied first
    want = F.linear(x[..., ::2].double(), w[:, ::2].double())
    torch.testing.assert_close(y.double(), want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("act", ["gelu", None])
def test_cuda_linear_unfused_where_the_build_has_no_fused_kernel(monkeypatch, caplog, act):
    """A build without float64 bias/activation kernels: the bias as a broadcast C and the
    activation in place after, logged once; bfloat16 stays fused."""
    build = Build(monkeypatch)
    build.drop(lambda k: k.dtype_a == "float64" and k.epilogue != "linear")
    lib = Library(monkeypatch, build)
    x, w, b = (
        torch.randn(5, 16, dtype=F64),
        torch.randn(8, 16, dtype=F64),
        torch.randn(8, dtype=F64),
    )
    for _ in range(3):
        y = pt._cuda._linear_cuda(x, w, b, act)
        torch.testing.assert_close(y, TORCH_ACT[act](F.linear(x, w, b)))
    assert lib.calls == [("tn", False)] * 3
    assert pt._cuda._UNFUSED == {("linear", "float64", "tn")}
    (record,) = fallbacks(caplog)
    assert "pycutlass_rt::linear" in record and "float64 tn bias/activation" in record
    pt._cuda._linear_cuda(x.to(BF16), w.to(BF16), b.to(BF16), act)
    assert lib.calls[-1] == ("tn", True) and len(fallbacks(caplog)) == 1


def test_cuda_mm_and_grad_mm_on_an_emulated_library(monkeypatch, caplog):
    lib = Library(monkeypatch)
    a, b = torch.randn(6, 4, dtype=F64), torch.randn(4, 5, dtype=F64)
    torch.testing.assert_close(pt._cuda._mm_cuda(a, b.t().contiguous().t()), a @ b)
    out = torch.empty(6, 5, dtype=F64)
    pt._cuda._mm_out_cuda(a, b, out=out)
    torch.testing.assert_close(out, a @ b)
    assert lib.calls == [("tn", False), ("tt", False)]
    g = torch.randn(5, dtype=F64).expand(6, 5)  # a gradient of sum(): strides (0, 1)
    torch.testing.assert_close(pt._cuda._grad_mm_cuda(g, b.t()), g @ b.t())
    assert lib.calls[-1] == ("tn", False)  # g copied to a row-major matrix first
    assert not pt._cuda._TORCH_MM and not fallbacks(caplog)


def test_a_dtype_without_kernels_falls_back_to_torch_logged_once(monkeypatch, caplog):
    """Backward GEMMs of a dtype the build has no kernel for run on torch.mm, logged once
    per (operator, dtype, layout); the forward operator raises (it never falls back)."""
    build = Build(monkeypatch)
    build.drop(lambda k: k.dtype_a == "float64")
    lib = Library(monkeypatch, build)
    a, b = torch.randn(6, 4, dtype=F64), torch.randn(4, 5, dtype=F64)
    for _ in range(3):
        torch.testing.assert_close(pt._cuda._grad_mm_cuda(a, b), a @ b)  # torch.mm instead
    assert lib.calls == [] and pt._cuda._TORCH_MM == {("_grad_mm", "float64", "tt")}
    (record,) = fallbacks(caplog)
    assert "pycutlass_rt::_grad_mm" in record and "float64 tt" in record and "torch.mm" in record
    torch.testing.assert_close(pt._cuda._grad_mm_cuda(a, b.t().contiguous().t()), a @ b)
    assert len(fallbacks(caplog)) == 2  # another layout: its own record
    with pytest.raises(pcr_errors.UnsupportedError, match="no float64"):
        pt._cuda._mm_cuda(a, b)
    pt._cuda._grad_mm_cuda(a.float(), b.float())  # float32 kernels are there
    assert lib.calls == [("tt", False)] and len(fallbacks(caplog)) == 2


def test_a_refusal_for_one_problem_leaves_the_op_working(monkeypatch, caplog):
    """The library refusing one problem (an over-large batch, a pinned kernel) raises for
    that call alone: the next problem of the same dtype and layout runs on the library."""
    lib = Library(monkeypatch, refuse=lambda a, b, d: a.shape[0] > 64 and "too large (test)")
    big, small, w = torch.randn(100, 16), torch.randn(8, 16), torch.randn(16, 4)
    weight = torch.randn(4, 16)  # nn.Linear's (N, K)
    for _ in range(2):
        with pytest.raises(pcr_errors.UnsupportedError, match="too large"):
            pt._cuda._grad_mm_cuda(big, w)
        torch.testing.assert_close(pt._cuda._grad_mm_cuda(small, w), small @ w)
        with pytest.raises(pcr_errors.UnsupportedError, match="too large"):
            pt._cuda._linear_cuda(big, weight, torch.randn(4), "relu")
        y = pt._cuda._linear_cuda(small, weight, None, "relu")
        torch.testing.assert_close(y, F.relu(F.linear(small, weight)))
    assert lib.calls == [("tt", False), ("tn", True)] * 2
    assert not (pt._cuda._TORCH_MM or pt._cuda._UNFUSED) and not fallbacks(caplog)


def test_strict_mode_raises_where_the_ops_would_fall_back(monkeypatch, caplog):
    """PYCUTLASS_RT_STRICT=1: no torch fallback and no unfused epilogue; the library's typed
    error reaches the caller, for a dtype without kernels as for a refused problem."""
    build = Build(monkeypatch)
    build.drop(lambda k: k.dtype_a == "float64")
    strict_says = "PYCUTLASS_RT_STRICT=1 requires a tuned cache (test)"
    lib = Library(monkeypatch, build, refuse=lambda a, b, d: a.dtype == BF16 and strict_says)
    monkeypatch.setenv("PYCUTLASS_RT_STRICT", "1")
    a, b = torch.randn(6, 4, dtype=F64), torch.randn(4, 5, dtype=F64)
    with pytest.raises(pcr_errors.UnsupportedError, match="no float64"):
        pt._cuda._grad_mm_cuda(a, b)
    with pytest.raises(pcr_errors.UnsupportedError, match="no float64"):
        pt._cuda._linear_cuda(a, b.t(), None, "relu")
    with pytest.raises(pcr_errors.UnsupportedError, match="PYCUTLASS_RT_STRICT"):
        pt._cuda._grad_mm_cuda(a.to(BF16), b.to(BF16))
    assert lib.calls == [] and not (pt._cuda._TORCH_MM or pt._cuda._UNFUSED)
    assert not fallbacks(caplog)
    monkeypatch.delenv("PYCUTLASS_RT_STRICT")
    torch.testing.assert_close(pt._cuda._grad_mm_cuda(a, b), a @ b)  # now torch's
    assert len(fallbacks(caplog)) == 1


def test_cuda_scaled_and_grouped_on_an_emulated_library(monkeypatch):
    Library(monkeypatch)
    a = torch.randint(-8, 8, (6, 32), dtype=torch.int8)
    w = torch.randint(-8, 8, (4, 32), dtype=torch.int8)
    sa, sw = torch.rand(6, 1), torch.rand(1, 4)
    y = pt._cuda._scaled_mm_cuda(a, w.t(), sa, sw, None, None)
    assert y.dtype == BF16
    torch.testing.assert_close(
        y.double(), (a.double() @ w.double().t()) * sa * sw, rtol=1e-2, atol=1e-2
    )
    x, wg = torch.randn(10, 16, dtype=BF16), torch.randn(3, 8, 16, dtype=BF16).transpose(1, 2)
    offs = torch.tensor([3, 3, 10], dtype=torch.int32)
    want = torch.cat([x[:3].double() @ wg[0].double(), x[3:].double() @ wg[2].double()])
    got = pt._cuda._grouped_mm_cuda(x.t().contiguous().t(), wg, offs)  # column-major x: copied
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)


def test_the_benchmarks_registrations():
    """benchmarks/torch_ops.py registers the other styles (custom_op, no autograd) of the
    same operators: they trace to the same shapes (a process of its own: namespaces are
    process-wide)."""
    r = run(
        "import sys, torch, pycutlass_rt.torch as pt\n"
        "sys.path.insert(0, 'benchmarks')\n"
        "import torch_ops\n"
        "from torch._subclasses.fake_tensor import FakeTensorMode\n"
        "made = torch_ops.bench_registrations(torch, pt)\n"
        "with FakeTensorMode():\n"
        "    x = torch.empty(4, 8, device='cuda', dtype=torch.bfloat16)\n"
        "    w = torch.empty(3, 8, device='cuda', dtype=torch.bfloat16)\n"
        "    print(sorted({tuple(l(x, w, None, 'gelu').shape + m(x, w.t()).shape)\n"
        "                  for _, m, l in made.values()}), len(made))"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[(4, 3, 4, 3)] 5"


# ---- conv2d: schemas, values, gradients, fake implementations, the CUDA code ---------------

CL = torch.channels_last
#: (x (N, C, H, W), w (K, C/groups, R, S), stride, padding, dilation, groups)
CONVS = [
    ((2, 8, 9, 7), (6, 8, 3, 3), 1, 1, 1, 1),
    ((2, 4, 11, 10), (6, 4, 3, 2), 2, (1, 0), 1, 1),
    ((1, 6, 12, 9), (4, 3, 3, 3), (2, 1), 2, (2, 1), 2),  # groups and dilation
    ((3, 5, 4, 4), (7, 5, 1, 1), 1, 0, 1, 1),  # 1x1, odd channels
]
CONV_IDS = ["3x3", "stride2", "groups2-dilated", "1x1"]


def conv_case(case, dtype=F64, grad=False, channels_last=True):
    xs, ws, stride, padding, dilation, groups = case
    x, w, b = torch.randn(xs, dtype=dtype), torch.randn(ws, dtype=dtype), torch.randn(ws[0])
    if channels_last:
        x, w = x.contiguous(memory_format=CL), w.contiguous(memory_format=CL)
    tensors = [t.to(dtype).requires_grad_(grad) for t in (x, w, b)]
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731 - as the schema's int[2]
    return tensors, dict(
        stride=pair(stride), padding=pair(padding), dilation=pair(dilation), groups=groups
    )


def is_channels_last(t):
    """t has the strides of a new channels_last tensor (what every conv operator returns)."""
    return t.stride() == torch.empty(t.shape, memory_format=CL).stride()


def test_conv_schemas():
    schemas = {
        ops.conv2d.default: "pycutlass_rt::conv2d(Tensor x, Tensor w, Tensor? bias=None, "
        "int[2] stride=1, int[2] padding=0, int[2] dilation=1, int groups=1, "
        "str? activation=None) -> Tensor",
        ops._conv2d_dgrad.default: "pycutlass_rt::_conv2d_dgrad(Tensor dy, Tensor w, "
        "SymInt[4] input_size, int[2] stride, int[2] padding, int[2] dilation, int groups) "
        "-> Tensor",
        ops._conv2d_wgrad.default: "pycutlass_rt::_conv2d_wgrad(Tensor dy, Tensor x, "
        "SymInt[4] weight_size, int[2] stride, int[2] padding, int[2] dilation, int groups) "
        "-> Tensor",
    }
    for op, schema in schemas.items():
        assert str(op._schema) == schema
    assert "conv2d" in pt.__all__


@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("act", [None, "relu", "gelu", "leaky_relu"])
@pytest.mark.parametrize("case", CONVS, ids=CONV_IDS)
def test_conv2d_matches_f_conv2d(case, act, channels_last):
    torch.manual_seed(0)
    (x, w, b), geo = conv_case(case, torch.float32, channels_last=channels_last)
    want = TORCH_ACT[act](F.conv2d(x, w, b, **geo))
    for bias in (b, None):
        if bias is None:
            want = TORCH_ACT[act](F.conv2d(x, w, None, **geo))
        y = pt.conv2d(x, w, bias, activation=act, **geo)
        torch.testing.assert_close(y, want)
        assert is_channels_last(y)
        z = ops.conv2d(x, w, bias, *geo.values(), act)  # positional, as the schema orders
        torch.testing.assert_close(z, want)


@pytest.mark.parametrize("act", [None, "relu", "silu", "tanh", "gelu_tanh"])
@pytest.mark.parametrize("how", ["op", "conv2d"])
@pytest.mark.parametrize("case", CONVS, ids=CONV_IDS)
def test_conv2d_gradients_match_torchs(case, how, act):
    """x's, w's and the bias's gradients against torch's own conv2d autograd (float64)."""
    torch.manual_seed(1)
    (x, w, b), geo = conv_case(case, grad=True)
    if how == "op":
        y = ops.conv2d(x, w, b, *geo.values(), act)
    else:
        y = pt.conv2d(x, w, b, activation=act, **geo)
    want = TORCH_ACT[act](F.conv2d(x, w, b, **geo))
    torch.testing.assert_close(y, want)
    g = torch.randn_like(want)
    got = torch.autograd.grad(y, (x, w, b), g)
    exp = torch.autograd.grad(want, (x, w, b), g)
    for name, have, ref in zip(("x", "w", "bias"), got, exp):
        torch.testing.assert_close(have, ref, msg=lambda m, name=name: f"grad of {name}: {m}")
    gx = torch.autograd.grad(ops.conv2d(x, w, None, *geo.values(), act).sum(), x)[0]
    torch.testing.assert_close(
        gx, torch.autograd.grad(TORCH_ACT[act](F.conv2d(x, w, **geo)).sum(), x)[0]
    )


def test_gradcheck_conv2d_and_double_backward():
    torch.manual_seed(2)
    (x, w, b), geo = conv_case(CONVS[2], grad=True)
    args = tuple(geo.values())
    assert torch.autograd.gradcheck(lambda x, w, b: ops.conv2d(x, w, b, *args, "tanh"), (x, w, b))
    assert torch.autograd.gradgradcheck(lambda x, w, b: ops.conv2d(x, w, b, *args), (x, w, b))
    # the backward passes' own gradients (the other passes)
    dy = torch.randn(ops.conv2d(x, w, None, *args).shape, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda dy, w: ops._conv2d_dgrad(dy, w, x.shape, *args), (dy, w))
    assert torch.autograd.gradcheck(lambda dy, x: ops._conv2d_wgrad(dy, x, w.shape, *args), (dy, x))


def test_conv2d_needs_input_grad_and_no_grad():
    (x, w, b), geo = conv_case(CONVS[0])
    w.requires_grad_()
    y = ops.conv2d(x, w, b, *geo.values(), "relu")
    (gw,) = torch.autograd.grad(y.sum(), w)
    torch.testing.assert_close(
        gw, torch.autograd.grad(F.relu(F.conv2d(x, w, b, **geo)).sum(), w)[0]
    )
    assert pt.conv2d(x, w, None, activation="silu", **geo).grad_fn.name() == "SiluBackward0"
    assert (
        pt.conv2d(x, w, None, activation="relu", **geo)
        .grad_fn.name()
        .startswith("GeneratedBackwardFor")
    )
    with torch.no_grad():
        assert pt.conv2d(x, w, None, activation="silu", **geo).grad_fn is None


@pytest.mark.parametrize("case", CONVS, ids=CONV_IDS)
def test_fake_conv2d(case):
    xs, ws, stride, padding, dilation, groups = case
    want = F.conv2d(torch.empty(xs), torch.empty(ws), None, stride, padding, dilation, groups)
    mode, (x, w, b) = fake_cuda((xs, BF16), (ws, BF16), ((ws[0],), BF16))
    with mode:  # x and w as they come (the fake implementations read sizes only)
        y = ops.conv2d(x, w, b, stride, padding, dilation, groups, "gelu")
        dx = ops._conv2d_dgrad(y, w, x.shape, stride, padding, dilation, groups)
        dw = ops._conv2d_wgrad(y, x, w.shape, stride, padding, dilation, groups)
    assert y.shape == want.shape and y.dtype == BF16 and y.device.type == "cuda"
    assert dx.shape == xs and dw.shape == ws
    for t in (y, dx, dw):
        assert is_channels_last(t)
    m = lambda *s: torch.empty(s, device="meta", dtype=BF16)  # noqa: E731
    assert ops.conv2d(m(*xs), m(*ws), None, stride, padding, dilation, groups).shape == want.shape


CONV_BAD = [
    (
        "conv 3-D",
        lambda f: ops.conv2d(f(2, 4, 5), f(3, 4, 3, 3)),
        RuntimeError,
        "x \\(N, C, H, W\\) and w \\(K, C/groups, R, S\\) must be 4-D",
    ),
    (
        "conv channels",
        lambda f: ops.conv2d(f(1, 4, 5, 5), f(3, 2, 3, 3)),
        RuntimeError,
        "x has 4 channels; w \\(3, 2, 3, 3\\) with groups=1 takes 2",
    ),
    (
        "conv groups",
        lambda f: ops.conv2d(f(1, 4, 5, 5), f(3, 2, 3, 3), None, 1, 0, 1, 2),
        RuntimeError,
        "3 output channels do not split into groups=2",
    ),
    (
        "conv dtypes",
        lambda f: ops.conv2d(f(1, 4, 5, 5), f(3, 4, 3, 3, dtype=F64)),
        RuntimeError,
        "one dtype",
    ),
    (
        "conv int8",
        lambda f: ops.conv2d(f(1, 4, 5, 5, dtype=torch.int8), f(3, 4, 3, 3, dtype=torch.int8)),
        RuntimeError,
        "takes float16, bfloat16, float32 or float64",
    ),
    (
        "conv output",
        lambda f: ops.conv2d(f(1, 4, 2, 5), f(3, 4, 3, 3)),
        RuntimeError,
        "the output would be 0x3",
    ),
    (
        "conv stride",
        lambda f: ops.conv2d(f(1, 4, 5, 5), f(3, 4, 3, 3), None, [1, 2, 3]),
        RuntimeError,
        "stride must be an int or two ints of at least 1",
    ),
    (
        "conv padding",
        lambda f: ops.conv2d(f(1, 4, 5, 5), f(3, 4, 3, 3), None, 1, -1),
        RuntimeError,
        "padding must be an int or two ints of at least 0",
    ),
    (
        "conv bias",
        lambda f: ops.conv2d(f(1, 4, 5, 5), f(3, 4, 3, 3), f(4)),
        RuntimeError,
        "bias must be a vector of 3",
    ),
    (
        "conv activation",
        lambda f: ops.conv2d(f(1, 4, 5, 5), f(3, 4, 3, 3), None, 1, 0, 1, 1, "softplus"),
        ValueError,
        "activation must be None or one of",
    ),
    (
        "dgrad dy",
        lambda f: ops._conv2d_dgrad(f(1, 3, 4, 3), f(3, 4, 3, 3), [1, 4, 5, 5], 1, 0, 1, 1),
        RuntimeError,
        "dy must be 1x3x3x3",
    ),
    (
        "dgrad input_size",
        lambda f: ops._conv2d_dgrad(f(1, 3, 3, 3), f(3, 4, 3, 3), [1, 4, 5], 1, 0, 1, 1),
        RuntimeError,
        "input_size must be \\(N, C, H, W\\)",
    ),
    (
        "wgrad channels",
        lambda f: ops._conv2d_wgrad(f(1, 3, 3, 3), f(1, 4, 5, 5), [3, 2, 3, 3], 1, 0, 1, 1),
        RuntimeError,
        "x has 4 channels",
    ),
    (
        "wgrad dy",
        lambda f: ops._conv2d_wgrad(f(1, 2, 3, 3), f(1, 4, 5, 5), [3, 4, 3, 3], 1, 0, 1, 1),
        RuntimeError,
        "dy must be 1x3x3x3",
    ),
]


@pytest.mark.parametrize("where", ["fake", "meta", "cpu"])
@pytest.mark.parametrize("case", CONV_BAD, ids=[c[0] for c in CONV_BAD])
def test_bad_conv_arguments_raise_the_same_error_everywhere(case, where):
    test_bad_arguments_raise_the_same_error_everywhere(case, where)


@pytest.mark.parametrize("act", [None, "relu", "silu"])
@pytest.mark.parametrize("case", CONVS, ids=CONV_IDS)
def test_opcheck_conv2d(case, act):
    (x, w, b), geo = conv_case(case, grad=True)
    s, p, d, g = (list(v) if isinstance(v, tuple) else v for v in geo.values())  # as lists
    opcheck(ops.conv2d.default, (x, w, b, s, p, d, g, act))
    opcheck(ops.conv2d.default, (x, w), {"groups": g, "dilation": d, "padding": p, "stride": s})
    dy = torch.randn(F.conv2d(x, w, None, **geo).shape, dtype=F64, requires_grad=True)
    opcheck(ops._conv2d_dgrad.default, (dy, w, list(x.shape), s, p, d, g))
    opcheck(ops._conv2d_wgrad.default, (dy, x, list(w.shape), s, p, d, g))
    # not channels_last: the same results, channels_last outputs
    xc, dyc = x.detach().contiguous(), dy.detach().contiguous()
    opcheck(ops._conv2d_dgrad.default, (dyc, w.detach().contiguous(), list(x.shape), s, p, d, g))
    opcheck(ops._conv2d_wgrad.default, (dyc, xc, list(w.shape), s, p, d, g))


def test_conv2d_dynamic_shapes_trace_once():
    """Forward and backward traced once over batch and image sizes (symbolic P and Q)."""
    f, counter = compiled(
        lambda x, w, b: pt.conv2d(x, w, b, stride=2, padding=1, activation="relu")
    )
    w, b = f64(6, 4, 3, 3), f64(6)
    for n, h, wd in ((2, 9, 7), (3, 12, 11), (4, 17, 10)):
        x = torch.randn(n, 4, h, wd, dtype=F64).contiguous(memory_format=CL).requires_grad_()
        y = f(x, w, b)
        want = F.relu(F.conv2d(x, w, b, stride=2, padding=1))
        torch.testing.assert_close(y, want)
        got = torch.autograd.grad(y.sum(), (x, w, b))
        exp = torch.autograd.grad(want.sum(), (x, w, b))
        for a, e in zip(got, exp):
            torch.testing.assert_close(a, e)
    assert counter.frame_count == 1, "recompiled for a new size"
    ops_in_graph = [
        n.target for g in counter.graphs for n in g.graph.nodes if n.op == "call_function"
    ]
    assert ops.conv2d.default in ops_in_graph


class ConvLibrary:
    """pycutlass_rt.conv2d, conv2d_dgrad and conv2d_wgrad as torch on the CPU, with the
    library's rules that the CUDA implementations depend on: packed channels_last torch
    tensors that need no gradient, an ``out`` to write, and the routes of
    pycutlass_rt._conv.run on the kernels of ``build``: a pointwise pass, a grouped one
    (but depthwise, or a grouped fprop with a bias) and float32 at fp32 accuracy as GEMMs
    (any layout), a depthwise pass (one filter per channel, channels in 16-byte vectors)
    on the depthwise kernels of that pass, the rest on the pass's convolution kernels; where none takes
    it, UnsupportedError. ``refuse(x_or_dy)`` may refuse one problem (a message)."""

    def __init__(self, monkeypatch, build=None, refuse=None):
        self.calls = []
        self.build = build or Build(monkeypatch)
        self.refuse = refuse
        monkeypatch.setattr(pt._cuda, "_pcr_conv2d", self.fprop)
        monkeypatch.setattr(pt._cuda, "_pcr_conv2d_dgrad", self.dgrad)
        monkeypatch.setattr(pt._cuda, "_pcr_conv2d_wgrad", self.wgrad)

    def route(self, op, image, filters, geo, math, bias, fused):
        """How the library would run the pass: "gemm", "conv", or None (no kernel)."""
        stride, padding, _, groups = geo
        dtype, out = kernel_dtype(image.dtype, math), kernel_dtype(image.dtype)
        gemm = self.build.has("gemm", dtype, out, GEMM_LAYOUTS, fused)
        pointwise = tuple(filters[2:]) == (1, 1) and tuple(stride) == (1, 1)
        if pointwise and tuple(padding) == (0, 0) and groups == 1 and gemm:
            return "gemm"
        if groups > 1 and filters[1] == 1:  # depthwise: the direct kernels of the pass
            whole = groups * image.element_size() % 16 == 0 and filters[0] == groups
            direct = self.build.has(op, dtype, out, ("nhwc",), fused, depthwise=True)
            return "conv" if whole and direct else None
        if groups > 1:
            takes = filters[1] > 1 and not (op == "fprop" and bias is not None)
            return "gemm" if takes and gemm else None
        if dtype == "float32" and gemm:  # math="ieee": the GEMM's 3xTF32 kernels, unfolded
            return "gemm"
        return "conv" if self.build.has(op, dtype, out, ("nhwc",), fused) else None

    def take(self, op, image, filters, geo, math, tensors, bias=None, activation=None):
        for t in tensors:
            assert not t.requires_grad, "exported a tensor that needs grad"
            assert t.permute(0, 2, 3, 1).is_contiguous(), "not channels_last"
        fused = bias is not None or activation is not None
        if self.route(op, image, filters, geo, math, bias, fused) is None:
            raise pcr_errors.UnsupportedError(f"no {op} kernel (emulated build)")
        why = self.refuse and self.refuse(tensors[0])
        if why:
            raise pcr_errors.UnsupportedError(why)
        self.calls.append((op, math))

    def fprop(self, x, w, bias, stride, padding, dilation, groups, *, activation, out, math):
        geo = (stride, padding, dilation, groups)
        self.take("fprop", x, w.shape, geo, math, (x, w, out), bias, activation)
        b = None if bias is None else bias.double()
        y = F.conv2d(x.double(), w.double(), b, stride, padding, dilation, groups)
        return out.copy_(TORCH_ACT[activation](y))

    def dgrad(self, dy, w, input_size, stride, padding, dilation, groups, *, out, math):
        geo = (stride, padding, dilation, groups)
        self.take("dgrad", dy, w.shape, geo, math, (dy, w, out))
        args = (input_size, w.double(), dy.double(), stride, padding, dilation, groups)
        return out.copy_(torch.nn.grad.conv2d_input(*args))

    def wgrad(self, dy, x, weight_size, stride, padding, dilation, groups, *, out, math):
        geo = (stride, padding, dilation, groups)
        self.take("wgrad", x, weight_size, geo, math, (dy, x, out))
        args = (x.double(), weight_size, dy.double(), stride, padding, dilation, groups)
        return out.copy_(torch.nn.grad.conv2d_weight(*args))


def conv_passes(x, w, b, args, act="relu"):
    """conv2d (twice), then its dgrad and wgrad, through the CUDA implementations, each
    checked against torch's float64 result."""
    tol = dict(rtol=2e-2, atol=2e-2)
    want = TORCH_ACT[act](F.conv2d(x.double(), w.double(), b.double(), *args))
    for _ in range(2):
        y = pt._cuda._conv2d_cuda(x, w.requires_grad_(), b, *args, act)
        torch.testing.assert_close(y.double(), want, **tol)
        assert y.dtype == x.dtype and is_channels_last(y)
    dy = torch.randn(want.shape, dtype=x.dtype)
    dx = pt._cuda._conv2d_dgrad_cuda(dy, w, list(x.shape), *args)
    dw = pt._cuda._conv2d_wgrad_cuda(dy, x, list(w.shape), *args)
    dx_want = torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), *args)
    dw_want = torch.nn.grad.conv2d_weight(x.double(), w.shape, dy.double(), *args)
    torch.testing.assert_close(dx.double(), dx_want, **tol)
    torch.testing.assert_close(dw.double(), dw_want, **tol)
    assert is_channels_last(dx) and is_channels_last(dw)


#: the passes the default build runs on the library, by case and dtype (float32: on TF32,
#: torch's default for convolutions): the rest run on torch's convolution
DEFAULT_BUILD_PASSES = {
    (BF16, "3x3"): ("fprop", "dgrad", "wgrad"),
    (BF16, "stride2"): ("fprop", "dgrad", "wgrad"),
    (BF16, "groups2-dilated"): ("dgrad", "wgrad"),  # a grouped fprop with a bias: none
    (BF16, "1x1"): ("fprop", "dgrad", "wgrad"),
    (torch.float32, "3x3"): (),  # no TF32 convolution kernel in the default build
    (torch.float32, "stride2"): (),
    (torch.float32, "groups2-dilated"): ("dgrad", "wgrad"),  # grouped: TF32 GEMM kernels
    (torch.float32, "1x1"): ("fprop", "dgrad", "wgrad"),  # pointwise: TF32 GEMM kernels
}


@pytest.mark.parametrize("dtype", [BF16, torch.float32])
@pytest.mark.parametrize("case", CONVS, ids=CONV_IDS)
def test_cuda_conv2d_on_an_emulated_library(monkeypatch, caplog, case, dtype):
    """Inputs made channels_last, one library call per pass into a channels_last output,
    where the default build has a kernel (or GEMM form) for the pass's dtype and form;
    elsewhere torch's convolution, logged once per pass."""
    lib = ConvLibrary(monkeypatch)
    torch.manual_seed(3)
    (x, w, b), geo = conv_case(case, dtype, channels_last=False)  # NCHW: copied first
    conv_passes(x, w, b, tuple(geo.values()))
    math = "tf32" if dtype == torch.float32 else None
    on_library = DEFAULT_BUILD_PASSES[dtype, CONV_IDS[CONVS.index(case)]]
    calls = [("fprop", math)] * 2 if "fprop" in on_library else []
    calls += [(p, math) for p in on_library if p != "fprop"]
    assert lib.calls == calls
    names = {"fprop": "conv2d", "dgrad": "_conv2d_dgrad", "wgrad": "_conv2d_wgrad"}
    torch_passes = {names[p] for p in ("fprop", "dgrad", "wgrad") if p not in on_library}
    assert {key[0] for key in pt._cuda._TORCH_CONV} == torch_passes
    assert len(fallbacks(caplog)) == len(torch_passes)  # fprop ran twice: logged once


def test_conv2d_without_a_kernel_for_the_dtype_or_form_falls_back_logged_once(monkeypatch, caplog):
    """float64 (no convolution kernel) and a depthwise convolution's dgrad and wgrad in a
    build without depthwise gradient kernels (no kernel of any kind) run on torch's
    convolution, each pass logged once; a pointwise float64 convolution is a GEMM the build
    has, a depthwise fprop the depthwise kernels' in a build holding them (but with a
    channel multiplier, or channels short of a 16-byte vector)."""
    lib = ConvLibrary(monkeypatch)
    lib.build.add(lambda k: k.depthwise and k.op == "fprop")
    (x, w, b), geo = conv_case(CONVS[0], F64)
    for _ in range(2):
        conv_passes(x, w, b, tuple(geo.values()))
    assert lib.calls == []
    assert pt._cuda._TORCH_CONV == {
        ("conv2d", "float64", "nhwc"),
        ("_conv2d_dgrad", "float64", "nhwc"),
        ("_conv2d_wgrad", "float64", "nhwc"),
    }
    assert len(fallbacks(caplog)) == 3 and "torch's convolution" in fallbacks(caplog)[0]
    (x, w, b), geo = conv_case(CONVS[3], F64)  # 1x1
    conv_passes(x, w, b, tuple(geo.values()))
    assert lib.calls == [("fprop", None)] * 2 + [("dgrad", None), ("wgrad", None)]
    x = torch.randn(2, 8, 6, 6, dtype=BF16).contiguous(memory_format=CL)
    w = torch.randn(8, 1, 3, 3, dtype=BF16).contiguous(memory_format=CL)
    conv_passes(x, w, torch.randn(8, dtype=BF16), ((1, 1), (1, 1), (1, 1), 8))
    assert lib.calls[4:] == [("fprop", None)] * 2 and len(fallbacks(caplog)) == 5
    assert {key for key in pt._cuda._TORCH_CONV if key[2] == "nhwc depthwise"} == {
        ("_conv2d_dgrad", "bfloat16", "nhwc depthwise"),
        ("_conv2d_wgrad", "bfloat16", "nhwc depthwise"),
    }
    for c, k in ((8, 16), (4, 4)):  # a channel multiplier of 2; 4 channels: 8 bytes
        x = torch.randn(2, c, 6, 6, dtype=BF16).contiguous(memory_format=CL)
        w = torch.randn(k, 1, 3, 3, dtype=BF16).contiguous(memory_format=CL)
        y = pt._cuda._conv2d_cuda(x, w, None, (1, 1), (1, 1), (1, 1), c)
        torch.testing.assert_close(y, F.conv2d(x, w, None, 1, 1, 1, c))
    assert len(lib.calls) == 6
    assert ("conv2d", "bfloat16", "nhwc depthwise other") in pt._cuda._TORCH_CONV


def test_depthwise_fprop_runs_on_the_depthwise_kernels_where_the_build_has_them(monkeypatch):
    """A depthwise fprop (bias and activation fused) is the library's while the build holds
    a depthwise kernel of its dtype (the extended tier's); a build without them falls back
    to torch's."""
    lib = ConvLibrary(monkeypatch)
    lib.build.add(lambda k: k.depthwise)
    x = torch.randn(2, 16, 7, 9, dtype=BF16).contiguous(memory_format=CL)
    w = torch.randn(16, 1, 3, 3, dtype=BF16).contiguous(memory_format=CL)
    b = torch.randn(16, dtype=BF16)
    want = F.relu(F.conv2d(x.double(), w.double(), b.double(), 2, 1, 1, 16))
    y = pt._cuda._conv2d_cuda(x, w, b, (2, 2), (1, 1), (1, 1), 16, "relu")
    torch.testing.assert_close(y.double(), want, rtol=2e-2, atol=2e-2)
    assert lib.calls == [("fprop", None)] and not pt._cuda._TORCH_CONV
    lib.build.drop(lambda k: k.schedule == "depthwise")
    pt._cuda._conv2d_cuda(x, w, b, (2, 2), (1, 1), (1, 1), 16, "relu")
    assert lib.calls == [("fprop", None)]
    assert pt._cuda._TORCH_CONV == {("conv2d", "bfloat16", "nhwc depthwise")}


def test_depthwise_passes_run_on_the_depthwise_kernels(monkeypatch, caplog):
    """With the direct depthwise kernels of every pass in the build (the extended tier's),
    a depthwise convolution's fprop, dgrad and wgrad all run on the library, at stride 1
    and 2, and nothing falls back."""
    lib = ConvLibrary(monkeypatch)
    lib.build.add(lambda k: k.depthwise)
    for stride in (1, 2):
        x = torch.randn(2, 16, 7, 9, dtype=BF16).contiguous(memory_format=CL)
        w = torch.randn(16, 1, 3, 3, dtype=BF16).contiguous(memory_format=CL)
        conv_passes(x, w, torch.randn(16, dtype=BF16), ((stride,) * 2, (1, 1), (1, 1), 16))
    passes = [("fprop", None)] * 2 + [("dgrad", None), ("wgrad", None)]
    assert lib.calls == passes * 2
    assert not pt._cuda._TORCH_CONV and not fallbacks(caplog)


def test_a_refused_convolution_leaves_the_op_working(monkeypatch, caplog):
    """One convolution the library refuses (say its implicit GEMM is too large) raises; the
    next of the same dtype and form runs on the library, and nothing falls back."""
    lib = ConvLibrary(monkeypatch, refuse=lambda t: t.shape[0] > 2 and "too large (test)")
    (x, w, b), geo = conv_case(CONVS[0], BF16)
    args = tuple(geo.values())
    big = torch.randn(3, *x.shape[1:], dtype=BF16).contiguous(memory_format=CL)
    for _ in range(2):
        with pytest.raises(pcr_errors.UnsupportedError, match="too large"):
            pt._cuda._conv2d_cuda(big, w, b, *args, "relu")
        pt._cuda._conv2d_cuda(x, w, b, *args, "relu")
    assert lib.calls == [("fprop", None)] * 2
    assert not pt._cuda._TORCH_CONV and not fallbacks(caplog)


def test_strict_mode_runs_every_convolution_on_the_library(monkeypatch, caplog):
    """PYCUTLASS_RT_STRICT=1: a float64 convolution raises the library's UnsupportedError
    instead of running torch's."""
    lib = ConvLibrary(monkeypatch)
    monkeypatch.setenv("PYCUTLASS_RT_STRICT", "1")
    (x, w, b), geo = conv_case(CONVS[0], F64)
    with pytest.raises(pcr_errors.UnsupportedError, match="no fprop kernel"):
        pt._cuda._conv2d_cuda(x, w, b, *geo.values(), "relu")
    assert lib.calls == [] and not pt._cuda._TORCH_CONV and not fallbacks(caplog)


# torch >= 2.9: once a program sets an fp32_precision, reading the legacy allow_tf32 raises,
# and that state lasts for the process: each case runs in a fresh interpreter
_PRECISION_CASE = """
import torch, pycutlass_rt.torch as pt
{setting}
def settings():
    b = torch.backends
    if hasattr(b, "fp32_precision"):
        return (b.fp32_precision, b.cuda.matmul.fp32_precision, b.cudnn.fp32_precision,
                b.cudnn.conv.fp32_precision)
    return (b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32)
before = settings()
seen = []
def gemm(a, b, c, d, *args, math=None, **kwargs):
    seen.append(math)
    return d.copy_(a.double() @ b.double())
pt._cuda._gemm = gemm
pt._cuda._mm_cuda(torch.randn(4, 8), torch.randn(8, 3))
conv = pt._cuda._conv_math(torch.float32)
assert settings() == before, "a torch setting was written"
print(seen[0], conv)
"""


@pytest.mark.parametrize(
    "setting, want",
    [
        ("", "None tf32"),  # torch's defaults: fp32 matmuls, TF32 convolutions
        ("torch.backends.cuda.matmul.allow_tf32 = True", "tf32 tf32"),
        ("torch.backends.cudnn.allow_tf32 = False", "None ieee"),
        ('torch.backends.fp32_precision = "tf32"', "tf32 tf32"),
        ('torch.backends.cuda.matmul.fp32_precision = "tf32"', "tf32 tf32"),
        (
            'torch.backends.fp32_precision = "tf32"; '
            'torch.backends.cuda.matmul.fp32_precision = "ieee"',
            "None tf32",
        ),
        ('torch.backends.cudnn.conv.fp32_precision = "ieee"', "None ieee"),
        ('torch.set_float32_matmul_precision("high")', "tf32 tf32"),
    ],
)
def test_float32_math_reads_torchs_setting_old_or_new(setting, want):
    """The float32 ops' math= follows torch's TF32 settings, set the legacy way or torch 2.9's
    (after which reading allow_tf32 raises), and writes none of them."""
    if "fp32_precision" in setting and not hasattr(torch.backends, "fp32_precision"):
        pytest.skip(f"torch {torch.__version__} has no fp32_precision (2.9 and later)")
    code = _PRECISION_CASE.format(setting=setting)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == want.split()


def test_cuda_conv2d_float32_ieee_runs_the_gemm_kernels(monkeypatch, caplog):
    """float32 with torch.backends.cudnn.allow_tf32 off asks for math="ieee": the library
    runs it as GEMMs on the unfolded input (3xTF32 kernels), with TF32 on on the
    convolution kernels' TF32 (none in the default build: torch's convolution then)."""
    lib = ConvLibrary(monkeypatch)
    (x, w, b), geo = conv_case(CONVS[0], torch.float32)
    args = tuple(geo.values())
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    for _ in range(2):
        y = pt._cuda._conv2d_cuda(x, w, b, *args, "gelu")
        torch.testing.assert_close(y, F.gelu(F.conv2d(x, w, b, **geo)))
        assert is_channels_last(y)
    assert lib.calls == [("fprop", "ieee")] * 2 and not pt._cuda._TORCH_CONV
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    pt._cuda._conv2d_cuda(x, w, b, *args, "gelu")
    assert len(lib.calls) == 2 and pt._cuda._TORCH_CONV == {("conv2d", "tfloat32", "nhwc")}
    assert len(fallbacks(caplog)) == 1
