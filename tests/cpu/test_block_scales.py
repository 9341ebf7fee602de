"""fp8 block scales and pcr.quantize without a GPU: which grids are read as block scales,
how they orient with a column-major d, which kernels may take them, and every refusal
before any launch (the GPU side: tests/gpu/test_block_scaled.py, test_quantize.py)."""

import ctypes

import pytest
from helpers import built_kernels

import pycutlass_rt as pcr
from pycutlass_rt import _call, _gemm, _lib, _quantize, _select, errors
from pycutlass_rt._abi import DLDataTypeCode, DLDeviceType, Dtype, Epilogue, Quant, ScaleKind

E4M3 = (DLDataTypeCode.Float8_e4m3fn, 8)
BF16 = (DLDataTypeCode.Bfloat, 16)
F32 = (DLDataTypeCode.Float, 32)
GROUPS, BLOCKS = ScaleKind.SCALE_GROUPS, ScaleKind.SCALE_BLOCKS
_next = [0x10000000]


def view(shape, strides=None, dtype=E4M3, data=None, device=DLDeviceType.CUDA):
    """A hand-built DLTensor said to be on cuda:0 (describe reads its shape and address,
    never its memory); each new one at its own 1 MiB-aligned address unless ``data``."""
    if strides is None:
        strides, step = [], 1
        for extent in reversed(shape):
            strides.insert(0, step)
            step *= extent
    if data is None:
        data = _next[0] = _next[0] + (1 << 28)
    t = _lib.DLTensor()
    t.data, t.ndim = data, len(shape)
    t.device.device_type, t.device.device_id = device, 0
    t.dtype.code, t.dtype.bits, t.dtype.lanes = *dtype, 1
    t.shape = (ctypes.c_int64 * len(shape))(*shape)
    t.strides = (ctypes.c_int64 * len(shape))(*strides)
    t._keep = (t.shape, t.strides)
    return t


def describe(lib, m, n, k, sa, sb, d_layout="t", bias=None, activation=0, ab_dtype=E4M3):
    """(status, problem, message) of x (m x k, row-major) @ w.T (w: n x k, row-major)."""
    a = view((m, k), dtype=ab_dtype)
    b = view((k, n), (1, k), dtype=ab_dtype)  # a weight's transpose: column-major b
    d = view((m, n), (n, 1) if d_layout == "t" else (1, m), dtype=BF16)
    x = _lib.Extras()
    x.scale_a, x.scale_b = (ctypes.pointer(s) if s is not None else None for s in (sa, sb))
    if bias is not None:
        x.bias = ctypes.pointer(bias)
    x.activation = activation
    p = _lib.Problem()
    st = lib.pcr_describe(a, b, None, d, 1.0, 0.0, ctypes.byref(x), ctypes.byref(p), None, 0)
    return st, p, lib.last_error()


def ok(st, msg):
    """describe took the problem (ERR_NO_DEVICE: all of it but the GPU); a build with no
    block-scaled kernel refuses it instead, saying so (after reading the grids)."""
    if not any(k.scale_m != "none" for k in pcr.kernels()):
        assert st == errors.ERR_UNSUPPORTED and "with block scales" in msg, msg
        return
    assert st in (0, errors.ERR_NO_DEVICE), msg


@pytest.mark.parametrize(
    "m, n, k",
    [(4096, 7168, 2048), (1, 7168, 2048), (300, 129, 1000), (17, 24576, 1536), (128, 256, 128)],
)
def test_deepseek_grids_are_block_scales(lib, m, n, k):
    """(M, K/128) per token and the weight's (N/128, K/128) transposed: GROUPS x BLOCKS,
    the epilogue left plain; partial last blocks round up."""
    kb, nb = -(-k // 128), -(-n // 128)
    sa = view((m, kb), (1, m), F32)  # M-major, as quantize() makes it
    sb = view((nb, kb), dtype=F32)  # weight_scale_inv as stored ...
    st, p, msg = describe(lib, m, n, k, sa, view((kb, nb), (1, kb), F32))  # ... transposed
    ok(st, msg)
    assert (p.scale_m, p.scale_n, p.epilogue) == (GROUPS, BLOCKS, Epilogue.EPI_LINEAR)
    assert sb is not None


def test_grids_of_any_strides_and_the_torch_recipes(lib):
    m, n, k = 300, 640, 1000
    kb, nb = 8, 5
    for sa in (
        view((m, kb), (kb, 1), F32),
        view((m, kb), (1, m), F32),
        view((m, kb), (1, 304), F32),
    ):
        st, p, msg = describe(lib, m, n, k, sa, view((kb, nb), (nb, 1), F32))
        ok(st, msg)
        assert (p.scale_m, p.scale_n) == (GROUPS, BLOCKS)
    # (BlockWise1x128, BlockWise1x128) and (BlockWise128x128, BlockWise1x128)
    st, p, msg = describe(lib, m, n, k, view((m, kb), dtype=F32), view((kb, n), dtype=F32))
    assert (p.scale_m, p.scale_n) == (GROUPS, GROUPS), msg
    st, p, msg = describe(lib, m, n, k, view((3, kb), dtype=F32), view((kb, n), dtype=F32))
    assert (p.scale_m, p.scale_n) == (BLOCKS, GROUPS), msg


def test_a_column_major_d_swaps_the_grids_roles(lib):
    m, n, k = 300, 640, 1000
    st, p, msg = describe(
        lib, m, n, k, view((m, 8), dtype=F32), view((8, 5), dtype=F32), d_layout="n"
    )
    assert p.transposed == 1 and (p.scale_m, p.scale_n) == (BLOCKS, GROUPS), msg


def test_vectors_and_single_values_keep_their_old_meaning(lib):
    """A K of one block makes (M, 1) both a per-row vector and a grid: it is read as the
    vector unless the other scale is a grid."""
    m, n, k = 64, 256, 128
    st, p, _ = describe(lib, m, n, k, view((m, 1), dtype=F32), view((1, n), dtype=F32))
    assert (p.scale_m, p.scale_n) == (ScaleKind.SCALE_VECTOR, ScaleKind.SCALE_VECTOR)
    st, p, msg = describe(lib, m, n, k, view((m, 1), dtype=F32), view((1, 2), dtype=F32))
    ok(st, msg)
    assert (p.scale_m, p.scale_n) == (GROUPS, BLOCKS)


def test_bias_and_activation_ride_a_block_scaled_kernel(lib):
    m, n, k = 64, 256, 512
    bias = view((n,), dtype=BF16)
    st, p, msg = describe(
        lib, m, n, k, view((m, 4), dtype=F32), view((4, 2), dtype=F32), bias=bias, activation=2
    )
    assert (p.scale_m, p.epilogue) == (GROUPS, Epilogue.EPI_BIASACT), msg


@pytest.mark.parametrize(
    "sa, sb, status, words",
    [
        ((300, 8), None, errors.ERR_INVALID_ARGUMENT, "block scales come in pairs"),
        ((300, 7), (8, 5), errors.ERR_INVALID_ARGUMENT, "so scale_a must be one: .300, 8."),
        ((300, 8), (8, 4), errors.ERR_INVALID_ARGUMENT, "so scale_b must be one"),
        ((300, 8), (1, 1), errors.ERR_INVALID_ARGUMENT, "so scale_b must be one"),
    ],
)
def test_grids_that_do_not_fit_are_named(lib, sa, sb, status, words):
    m, n, k = 300, 640, 1000
    st, _, msg = describe(lib, m, n, k, view(sa, dtype=F32), view(sb, dtype=F32) if sb else None)
    assert st == status and pytest.importorskip("re").search(words, msg), msg


def test_grid_refusals(lib):
    m, n, k = 300, 640, 1000
    sb = view((8, 5), dtype=F32)
    st, _, msg = describe(lib, m, n, k, view((m, 8), dtype=BF16), sb)
    assert st == errors.ERR_UNSUPPORTED and "must be float32" in msg
    st, _, msg = describe(lib, m, n, k, view((m, 8), dtype=F32, data=0x10000002), sb)
    assert st == errors.ERR_MISALIGNED and "element size" in msg
    st, _, msg = describe(lib, m, n, k, view((m, 8), (-1, 1), F32), sb)
    assert st == errors.ERR_INVALID_ARGUMENT and "strides" in msg
    st, _, msg = describe(lib, m, n, k, view((m, 8), dtype=F32), sb, ab_dtype=BF16)
    assert st == errors.ERR_UNSUPPORTED and "dequantize fp8 inputs" in msg
    host = view((m, 8), dtype=F32, device=DLDeviceType.CPU)
    st, _, msg = describe(lib, m, n, k, host, sb)
    assert st == errors.ERR_DEVICE_MISMATCH, msg


def test_d_may_not_overlap_a_grid(lib):
    m, n, k = 300, 640, 1000
    a, b = view((m, k)), view((k, n), (1, k))
    d = view((m, n), dtype=BF16)
    x = _lib.Extras()
    sa = view((m, 8), dtype=F32, data=d.data + 64)  # inside d's bytes
    x.scale_a, x.scale_b = ctypes.pointer(sa), ctypes.pointer(view((8, 5), dtype=F32))
    p = _lib.Problem()
    st = lib.pcr_describe(a, b, None, d, 1.0, 0.0, ctypes.byref(x), ctypes.byref(p), None, 0)
    assert st == errors.ERR_OVERLAP and "d overlaps scale_a" in lib.last_error()


def test_block_scaled_kernels_take_only_their_grids(lib):
    """The catalogue's _blk kernels say which grids their mainloop reads, and the library
    judges by them: a problem with per-token and per-block grids is refused by every
    kernel without those grids, saying so, and by none of the _blkgb ones for it."""
    for kern in pcr.kernels():
        if "_blk" in kern.name:
            word = kern.name.split("_blk")[1][:2]
            kinds = {"g": "groups", "b": "blocks"}
            assert (kern.scale_m, kern.scale_n) == (kinds[word[0]], kinds[word[1]])
            assert kern.dtype_a == "float8_e4m3fn" and not kern.tensor_scales
        else:
            assert (kern.scale_m, kern.scale_n) == ("none", "none")
    e4m3 = Dtype.E4M3
    p = _lib.Problem(
        m=256,
        n=512,
        k=1024,
        batch=1,
        dtype_a=e4m3,
        dtype_b=e4m3,
        cc=90,
        dtype_d=Dtype.BF16,
        layout_b=1,
        align_a=16,
        align_b=16,
        align_d=16,
        scale_m=GROUPS,
        scale_n=BLOCKS,
        device=-1,
        epilogue=Epilogue.EPI_LINEAR,
    )
    verdicts = _call.judge(lib, p).verdicts
    for kern in pcr.kernels():
        status, why = verdicts[kern.index]
        same = (kern.dtype_a, kern.dtype_d, kern.layout, kern.op) == (
            "float8_e4m3fn",
            "bfloat16",
            "tn",
            "gemm",
        )
        if not same or kern.grouped:
            continue
        if (kern.scale_m, kern.scale_n) == ("groups", "blocks") and kern.family == 90:
            assert status == 0 or "block" not in why, (kern.name, why)
        elif (kern.scale_m, kern.scale_n) != ("groups", "blocks"):
            assert status and "block scales" in why, (kern.name, why)


# ---- quantize ---------------------------------------------------------------------------


def quantize(lib, x, q, s, gran, dynamic=1):
    st = lib.pcr_quantize(x, q, s, gran, dynamic, None)
    return st, lib.last_error()


@pytest.mark.parametrize(
    "gran, grid",
    [
        (Quant.QUANT_TENSOR, (1,)),
        (Quant.QUANT_TOKEN, (300, 1)),
        (Quant.QUANT_TOKEN, (300,)),
        (Quant.QUANT_GROUP, (300, 8)),
        (Quant.QUANT_BLOCK, (3, 8)),
    ],
)
def test_quantize_takes_each_grid(lib, gran, grid):
    x, q = view((300, 1000), dtype=BF16), view((300, 1000))
    st, msg = quantize(lib, x, q, view(grid, dtype=F32), gran)
    assert st in (0, errors.ERR_NO_DEVICE), msg


@pytest.mark.parametrize(
    "change, status, words",
    [
        ({"grid": (300, 7)}, errors.ERR_INVALID_ARGUMENT, r"takes \(300, 8\)"),
        ({"q_dtype": BF16}, errors.ERR_UNSUPPORTED, "float8_e4m3fn or int8"),
        ({"x_dtype": E4M3}, errors.ERR_UNSUPPORTED, "float16, bfloat16 or float32"),
        ({"q_shape": (300, 999)}, errors.ERR_INVALID_ARGUMENT, "must have x's shape"),
        ({"x_strides": (1000, 2)}, errors.ERR_INVALID_ARGUMENT, "contiguous"),
        ({"scale_dtype": BF16}, errors.ERR_UNSUPPORTED, "scale must be float32"),
        ({"scale_data": 0x3}, errors.ERR_MISALIGNED, "element size"),
        ({"grid_strides": (0, 1)}, errors.ERR_INVALID_ARGUMENT, "broadcast view"),
        ({"q_on_x": True}, errors.ERR_OVERLAP, "q overlaps x"),
        ({"host": True}, errors.ERR_DEVICE_MISMATCH, "one GPU"),
        ({"gran": 9}, errors.ERR_INVALID_ARGUMENT, "unknown granularity"),
    ],
)
def test_quantize_refusals(lib, change, status, words):
    x = view((300, 1000), change.get("x_strides"), change.get("x_dtype", BF16))
    q = view(
        change.get("q_shape", (300, 1000)),
        dtype=change.get("q_dtype", E4M3),
        data=x.data if change.get("q_on_x") else None,
    )
    s = view(
        change.get("grid", (300, 8)),
        change.get("grid_strides"),
        change.get("scale_dtype", F32),
        data=change.get("scale_data"),
        device=DLDeviceType.CPU if change.get("host") else DLDeviceType.CUDA,
    )
    st, msg = quantize(lib, x, q, s, change.get("gran", Quant.QUANT_GROUP))
    assert st == status and pytest.importorskip("re").search(words, msg), msg


def test_quantize_grid_shapes_and_layouts():
    """New grids are M-major for groups (the kernels' and torch's BlockWise1x128 layout)."""
    assert _quantize.grid_shape((4096, 7168), Quant.QUANT_GROUP) == (4096, 56)
    assert _quantize.grid_strides((4096, 7168), Quant.QUANT_GROUP) == (1, 4096)
    assert _quantize.grid_shape((7168, 2048), Quant.QUANT_BLOCK) == (56, 16)
    assert _quantize.grid_shape((5, 7, 300), Quant.QUANT_TOKEN) == (5, 7, 1)
    assert _quantize.grid_shape((300,), Quant.QUANT_TENSOR) == ()


def test_quantize_arguments_are_named_before_anything_runs():
    np = pytest.importorskip("numpy")
    x = np.ones((4, 8), np.float32)
    with pytest.raises(pcr.InvalidArgumentError, match="granularity must be one of"):
        pcr.quantize(x, granularity="row")
    with pytest.raises(pcr.InvalidArgumentError, match="dtype must be"):
        pcr.quantize(x, dtype="float8_e5m2")
    with pytest.raises(pcr.InvalidArgumentError, match="'block' takes a 2-D x"):
        pcr.quantize(np.ones((2, 4, 8), np.float32), granularity="block")
    with pytest.raises(pcr.UnsupportedError, match="numpy has no float8_e4m3fn"):
        pcr.quantize(x)  # no fp8 output can be made there
    with pytest.raises(pcr.DeviceMismatchError, match="host arrays are not taken"):
        pcr.quantize(x, "int8")  # numpy: host memory (quantize runs on the GPU only)


# ---- quantized outputs: amax and scale_d -------------------------------------------------


def describe_out(lib, d_dtype, amax=True, scale_d=True, ab_dtype=E4M3, scales=False, k=512, **kw):
    m, n = 64, 256
    a, b = view((m, k), dtype=ab_dtype), view((k, n), (1, k), dtype=ab_dtype)
    d = view((m, n), dtype=d_dtype, data=kw.get("d_data"))
    x = _lib.Extras()
    if amax:
        x.amax = ctypes.pointer(view((), (), F32))
    if scale_d:
        x.scale_d = ctypes.pointer(view((1,), dtype=F32, data=kw.get("scale_d_data")))
    if scales:
        x.scale_a = ctypes.pointer(view((1,), dtype=F32))
        x.scale_b = ctypes.pointer(view((1,), dtype=F32))
    if kw.get("aux"):
        x.aux = ctypes.pointer(view((m, n), dtype=d_dtype))
    p = _lib.Problem()
    st = lib.pcr_describe(a, b, None, d, 1.0, 0.0, ctypes.byref(x), ctypes.byref(p), None, 0)
    return st, p, lib.last_error()


def test_quantized_outputs_ask_for_an_out_scale_kernel(lib):
    built = {(k.dtype_a, k.dtype_d) for k in built_kernels() if k.out_scale}
    for d_dtype, name in ((E4M3, "float8_e4m3fn"), (BF16, "bfloat16")):
        for amax, scale_d in ((True, True), (True, False), (False, True)):
            st, p, msg = describe_out(lib, d_dtype, amax, scale_d)
            if ("float8_e4m3fn", name) in built:  # no grids here: ok()'s refusal is not due
                assert st in (0, errors.ERR_NO_DEVICE), msg
                assert p.out_scale == 1 and p.epilogue == Epilogue.EPI_LINEAR
            else:
                assert st == errors.ERR_UNSUPPORTED and "reducing amax or applying" in msg, msg
    # with scale tensors the same; without amax and scale_d no out_scale is asked for
    st, p, msg = describe_out(lib, BF16, scales=True)
    assert p.out_scale == 1 or st == errors.ERR_UNSUPPORTED, msg
    st, p, msg = describe_out(lib, BF16, amax=False, scale_d=False)
    assert p.out_scale == 0, msg


def test_quantized_output_refusals(lib):
    st, _, msg = describe_out(lib, BF16, ab_dtype=BF16, amax=False)
    assert st == errors.ERR_UNSUPPORTED and "scale_d scales a quantized GEMM" in msg
    st, _, msg = describe_out(lib, E4M3, aux=True)
    assert st == errors.ERR_UNSUPPORTED and "aux with quantized inputs" in msg
    st, _, msg = describe_out(lib, E4M3, k=0)
    assert st == errors.ERR_UNSUPPORTED and "K = 0" in msg
    st, _, msg = describe_out(lib, E4M3, scale_d_data=0x10000001)
    assert st == errors.ERR_MISALIGNED and "scale_d" in msg and "element size" in msg
    d_at = 0x7000000
    st, _, msg = describe_out(lib, E4M3, d_data=d_at, scale_d_data=d_at + 64)
    assert st == errors.ERR_OVERLAP and "d overlaps scale_d" in msg
    s32 = (DLDataTypeCode.Int, 32)
    st, _, msg = describe_out(lib, s32, ab_dtype=(DLDataTypeCode.Int, 8), scale_d=False)
    assert st == errors.ERR_UNSUPPORTED and "int32 outputs" in msg


def test_out_scale_kernels_are_the_quantized_epilogues():
    """Every family's dequantizing epilogue reduces amax and applies scale_d (the sm80
    family's ScaledTree as well as sm90a's QuantizedOutput), and the sm90a/sm100a linear
    kernels that read scale tensors or block scales; grouped kernels none of them."""
    for k in pcr.kernels():
        quantized = not k.grouped and (
            k.epilogue == "scaled"
            or (k.family in (90, 100) and (k.tensor_scales or k.scale_m != "none"))
        )
        assert k.out_scale == quantized, k.name


# ---- matmul: the result in a's framework -------------------------------------------------


def test_matmul_makes_its_output_in_as_framework(lib, monkeypatch):
    np = pytest.importorskip("numpy")
    seen = {}

    def fake_gemm(a, b, c, d, **kw):
        seen.update(d=d, kw=kw)
        return d

    monkeypatch.setattr(_gemm, "gemm", fake_gemm)
    a, b = np.ones((5, 8), np.float32), np.ones((8, 3), np.float32)
    y = pcr.matmul(a, b, activation="relu")
    assert y is seen["d"] and y.shape == (5, 3) and y.dtype == np.float32
    assert seen["kw"]["activation"] == "relu"
    yb = pcr.matmul(np.ones((4, 5, 8), np.float16), b.astype(np.float16))
    assert yb.shape == (4, 5, 3) and yb.dtype == np.float16
    i8 = np.ones((5, 8), np.int8)
    assert pcr.matmul(i8, i8.T.copy()).dtype == np.int32
    out = np.empty((5, 3), np.float32)
    assert pcr.matmul(a, b, out=out) is out
    with pytest.raises(pcr.InvalidArgumentError, match="out is float32 but out_dtype is int32"):
        pcr.matmul(a, b, out=out, out_dtype="int32")
    with pytest.raises(pcr.InvalidArgumentError, match="matmul takes"):
        pcr.matmul(np.ones(3), b)
    with pytest.raises(pcr.UnsupportedError, match="numpy has no bfloat16"):
        pcr.matmul(a, b, out_dtype="bfloat16")


BLK = "sm90_e4m3_e4m3_f32_bf16_tn_"
COOP, SWAP16 = (
    BLK + "128x128x128_c1x1_coop_blkgb_a16",
    BLK + "16x128x128_c1x1_pingpong_blkgb_swapab_a16",
)


@pytest.mark.parametrize("m, n, k, first", [(2156, 512, 6144, COOP), (4, 8192, 8192, SWAP16)])
def test_narrow_block_scaled_tiles_pay_the_k_iteration_floor(lib, m, n, k, first):
    """A block-scaled K iteration has a floor narrow tiles hit (the model's kBlockIterUs):
    a prefill's tokens go to the 128x128 tile, not the swap-AB 16-wide one the tensor
    cores' pace alone would pick; decode's few tokens still take the swap-AB tile."""
    names = {k.name for k in pcr.kernels()}
    if not {COOP, SWAP16} <= names:
        pytest.skip("the build lacks the 128x128 or the swap-AB 16x128 block-scaled kernel")
    kb, nb = -(-k // 128), -(-n // 128)
    st, p, msg = describe(lib, m, n, k, view((m, kb), (1, m), F32), view((kb, nb), (1, kb), F32))
    ok(st, msg)
    p.device, p.cc, p.sm_count = -1, 90, 132
    ranked = [kern.name for kern, _ in _select.ranking(lib, p) if kern.name in (COOP, SWAP16)]
    assert ranked[0] == first, ranked
