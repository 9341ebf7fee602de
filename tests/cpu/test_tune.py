"""pycutlass_rt.tune and its per-device cache, on CPU: fake library, kernels and timings."""

import contextlib
import ctypes
import json
import os
import warnings

import pytest

from pycutlass_rt import _abi, _cache, _call, _kernels, _select, _table, _tune, errors
from pycutlass_rt._kernels import KernelInfo
from pycutlass_rt._lib import Problem

BF16 = 2


def kern(i, name, tile=(128, 128, 64), family=90, split="none"):
    return KernelInfo(
        i,
        name,
        family,
        "bfloat16",
        "bfloat16",
        "float32",
        "bfloat16",
        "tn",
        tile,
        (1, 1, 1),
        (0, 0, 0),
        0,
        "coop",
        "linear",
        split,
        (8, 8, 8),
    )


BIG = kern(0, "sm90_bf16_bf16_f32_bf16_tn_128x256x64_c2x1_coop_a8", (128, 256, 64))
SMALL = kern(1, "sm90_bf16_bf16_f32_bf16_tn_64x64x128_c1x1_pingpong_a8", (64, 64, 128))
SK = kern(
    2, "sm90_bf16_bf16_f32_bf16_tn_128x64x64_c1x1_coop_streamk_a8", (128, 64, 64), split="streamk"
)
B100 = kern(3, "sm100_bf16_bf16_f32_bf16_tn_128x128x64_c1x1_1sm_a8", family=100)
KERNELS = [BIG, SMALL, SK, B100]
NAMES = [k.name for k in KERNELS]
#: the table prefers BIG everywhere; for 16x4096x4096 the model prefers SMALL, then SK
RULES = {"format": 1, "families": {"sm90": [{"prefer": ["sm90_*_128x256x64_c2x1_coop_a8"]}]}}


class FakeLib:
    """The library functions selection and the cache use, with one device."""

    def __init__(self, gpu="NVIDIA H200", sms=132, driver=12080, build=b'{"abi": 1}', reject=None):
        self.gpu, self.sms, self.driver, self.build = gpu, sms, driver, build
        self.reject = reject or {}  # kernel index -> reason
        self.error = ""
        self.clears = 0
        self.described = []

    def pcr_device_name(self, dev, buf, size):
        if dev != 0:
            return errors.ERR_NO_DEVICE
        buf.value = self.gpu.encode()
        return 0

    def pcr_device_cc(self, dev, cc, sms):
        cc._obj.value, sms._obj.value = 90, self.sms
        return 0 if dev == 0 else errors.ERR_NO_DEVICE

    def pcr_driver_version(self, out):
        out._obj.value = self.driver
        return 0

    def pcr_build_info(self):
        return self.build

    def verdicts(self, count=None):
        """Each kernel's (status, reason): the ones in ``reject`` are misaligned."""
        count = len(KERNELS) if count is None else count
        return [
            (errors.ERR_MISALIGNED, self.reject[i]) if i in self.reject else (0, "")
            for i in range(count)
        ]

    def _fill(self, array, count):
        for i, (status, reason) in enumerate(self.verdicts(count)):
            array[i].status, array[i].reason = status, reason.encode()

    def pcr_kernel_verdicts(self, problem, array, count):
        self._fill(array, count)
        return 0

    def last_error(self):
        return self.error

    def pcr_select_clear(self):
        self.clears += 1
        return 0

    def pcr_py_describe(self, a, b, c, d, alpha, beta, extras, out, array, count):
        ctypes.pointer(out._obj)[0] = problem(a)  # "a" carries the problem's m
        self._fill(array, count)
        self.described.append(a)
        return 0

    def check(self, status):
        if status:
            raise errors.from_status(status, self.error)


def problem(m=16, n=4096, k=4096, device=0, **kw):
    fields = dict(
        dtype_a=BF16,
        dtype_b=BF16,
        dtype_d=BF16,
        layout_b=1,
        align_a=16,
        align_b=16,
        align_d=16,
        cc=90,
        sm_count=132,
        batch=1,
    )
    return Problem(m=m, n=n, k=k, device=device, **{**fields, **kw})


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv(_cache.DIR_ENV, str(d))
    monkeypatch.delenv(_cache.STRICT_ENV, raising=False)
    monkeypatch.setattr(_table, "table", lambda: RULES)
    _cache.reset()
    yield d
    _cache.reset()


def dev_of(lib):
    return _cache.device_key(lib, 0, NAMES)


def pin(lib, kernel, pinned=True, p=None):
    return _cache.store(
        dev_of(lib),
        {_cache.problem_key(p or problem()): {"kernel": kernel.name, "us": 1.0, "pinned": pinned}},
    )


def real_kernels():
    """Three of this build's plain sm90 bf16 tn kernels and one of another dtype: what the
    selection tests pin and rank (the library ranks its own kernels only)."""
    import pycutlass_rt as pcr

    mine = [
        k
        for k in pcr.kernels()
        if (k.family, k.dtype_a, k.dtype_d, k.layout, k.op, k.grouped, k.epilogue, k.scale_m)
        == (90, "bfloat16", "bfloat16", "tn", "gemm", False, "linear", "none")
        and k.align[0] == 8
    ]
    other = next(k for k in pcr.kernels() if k.dtype_a != "bfloat16")
    if len(mine) < 3:
        pytest.skip("this build holds fewer than 3 plain sm90 bf16 tn kernels")
    return mine, other


@pytest.fixture
def selector(cache_dir, monkeypatch):
    """The real library's selector, handed the cache of FakeLib()'s device key for device 0
    (no GPU here: the verdicts of the same problem judged without one stand in)."""
    from pycutlass_rt import _lib

    lib = _lib.load()
    dev = dev_of(FakeLib())
    monkeypatch.setattr(
        _cache, "device_key", lambda lib_, device, names: dev if device == 0 else None
    )
    lib.check(lib.pcr_select_clear())
    yield lib
    _cache.reset()


def ranked(lib, p=None, tuned=True):
    """[(name, why)]: the library's ranking of ``p`` on device 0."""
    p = p or problem()
    alone = Problem.from_buffer_copy(p)
    alone.device = -1
    verdicts = _call.judge(lib, alone).array
    return [(k.name, why) for k, why in _select.ranking(lib, p, verdicts, tuned=tuned)]


def pin_real(kernel, pinned=True, p=None):
    """pin() of a real kernel into FakeLib()'s file, read anew by the library."""
    path = _cache.store(
        dev_of(FakeLib()),
        {_cache.problem_key(p or problem()): {"kernel": kernel.name, "us": 1.0, "pinned": pinned}},
    )
    _cache.reset()
    return path


# ---- where the cache lives, and its key ---------------------------------------------------


@pytest.mark.parametrize(
    "env, expect",
    [
        ({"PYCUTLASS_RT_CACHE_DIR": "/x/pcr", "XDG_CACHE_HOME": "/xdg"}, "/x/pcr"),
        ({"XDG_CACHE_HOME": "/xdg"}, "/xdg/pycutlass_rt"),
        ({}, "HOME/.cache/pycutlass_rt"),
    ],
)
def test_cache_dir_resolution(env, expect, monkeypatch, tmp_path):
    for var in ("PYCUTLASS_RT_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _cache.cache_dir() == expect.replace("HOME", str(tmp_path))


@pytest.mark.parametrize(
    "change",
    [{"gpu": "NVIDIA H100 80GB HBM3"}, {"sms": 114}, {"driver": 13000}, {"build": b'{"abi": 2}'}],
)
def test_each_part_of_the_device_key_selects_another_file(change, cache_dir):
    here = dev_of(FakeLib())
    _cache.reset()
    other = dev_of(FakeLib(**change))
    assert here != other and _cache.path_for(here) != _cache.path_for(other)
    assert os.path.basename(_cache.path_for(here)).startswith("nvidia-h200-132sm-")


def test_build_id_covers_the_kernel_list():
    lib = FakeLib()
    assert _cache.build_id(lib, NAMES) != _cache.build_id(lib, NAMES[:-1])


def test_no_device_means_no_cache(selector):
    mine, _ = real_kernels()
    pin_real(mine[-1])
    for device in (-1, 3):  # no such device: nothing is handed over
        assert ranked(selector, problem(device=device)) == ranked(selector, tuned=False)


# ---- writing and reading ------------------------------------------------------------------


def test_store_merges_atomically_and_leaves_no_temporary(cache_dir):
    lib = FakeLib()
    path = pin(lib, SK, pinned=False)
    pin(lib, SMALL, pinned=False, p=problem(m=64))
    doc = json.loads(open(path).read())
    assert doc["kind"] == _cache.KIND and doc["device"] == dev_of(lib)
    assert {e["kernel"] for e in doc["entries"].values()} == {SK.name, SMALL.name}
    assert os.listdir(cache_dir) == [os.path.basename(path)]


def test_a_failed_write_keeps_the_old_file(cache_dir, monkeypatch):
    lib = FakeLib()
    path = pin(lib, SK)
    before = open(path).read()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(_cache.json, "dump", broken)
    with pytest.raises(OSError, match="disk full"):
        pin(lib, SMALL, p=problem(m=64))
    assert open(path).read() == before and os.listdir(cache_dir) == [os.path.basename(path)]


@pytest.mark.parametrize(
    "content, why",
    [
        ("{not json", "unreadable"),
        ('["a list"]', "not a pycutlass_rt tuned cache"),
        (
            '{"kind": "pycutlass_rt tuned kernels", "format": 99, "device": {}, "entries": {}}',
            "format 99",
        ),
        (
            json.dumps(
                {"kind": _cache.KIND, "format": _cache.FORMAT, "device": {}, "entries": {"p": 3}}
            ),
            "malformed entries",
        ),
        ("FOREIGN", "made for NVIDIA A100"),
    ],
)
def test_corrupt_or_foreign_files_are_ignored_with_a_warning(content, why, selector, cache_dir):
    mine, _ = real_kernels()
    lib = FakeLib()
    path = _cache.path_for(dev_of(lib))
    os.makedirs(cache_dir)
    if content == "FOREIGN":  # a valid file of another device key, under this key's name
        content = json.dumps(
            {
                "kind": _cache.KIND,
                "format": _cache.FORMAT,
                "entries": {},
                "device": {**dev_of(lib), "gpu": "NVIDIA A100"},
            }
        )
    with open(path, "w") as f:
        f.write(content)
    untuned = ranked(selector, tuned=False)
    with pytest.warns(RuntimeWarning, match=why):
        assert ranked(selector) == untuned  # the table decides, nothing crashed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        selector.check(selector.pcr_select_clear())
        ranked(selector, problem(m=32))  # read once: no second warning
    with pytest.warns(RuntimeWarning, match="replacing"):
        pin_real(mine[-1])  # a write replaces the broken file
    assert ranked(selector)[0][0] == mine[-1].name


def test_files_are_read_once(selector):
    mine, _ = real_kernels()
    path = pin_real(mine[-1], pinned=False)
    assert ranked(selector)[0][0] == mine[-1].name
    os.unlink(path)
    selector.check(selector.pcr_select_clear())  # asked again: the loaded copy serves
    assert ranked(selector)[0][0] == mine[-1].name


# ---- selection order ----------------------------------------------------------------------


def test_cache_then_table_then_model(selector):
    """The library's order: the tuned entry, then the table and model's (unchanged)."""
    mine, _ = real_kernels()
    untuned = ranked(selector, tuned=False)
    assert ranked(selector) == untuned
    assert untuned[0][1].startswith(("table rule", "calibrated model", "analytic model"))
    last = next(n for n, _ in reversed(untuned) if n in {k.name for k in mine})
    path = pin_real(next(k for k in mine if k.name == last), pinned=False)
    order = ranked(selector)
    assert order[0] == (last, f"tuned on this device (cache file {path})")
    assert order[1:] == [(n, w) for n, w in untuned if n != last]
    assert ranked(selector, problem(m=17)) == ranked(selector, problem(m=17), tuned=False)


def test_cache_ignored_when_asked(selector):
    mine, _ = real_kernels()
    untuned = ranked(selector, tuned=False)
    pin_real(mine[-1])
    assert ranked(selector, tuned=False) == untuned and len(ranked(selector)) == 1


def test_unpinned_entry_for_a_kernel_that_cannot_run_is_skipped(selector):
    """A 2-byte-aligned A: the tuned 8-aligned kernel cannot take it; the others rank."""
    mine, _ = real_kernels()
    p = problem(align_a=2)
    pin_real(mine[0], pinned=False, p=p)
    order = ranked(selector, p)
    assert order == ranked(selector, p, tuned=False) and mine[0].name not in dict(order)


def test_pinned_kernel_admits_no_other(selector):
    mine, _ = real_kernels()
    path = pin_real(mine[1])
    assert ranked(selector) == [
        (mine[1].name, f"pinned by tune(strict=True) on this device (cache file {path})")
    ]


@pytest.mark.parametrize("case", ["misaligned", "other dtypes", "missing"])
def test_pinned_kernel_that_cannot_run_is_an_error(case, selector):
    mine, other = real_kernels()
    p = problem(align_a=2) if case == "misaligned" else problem()
    pinned = other if case == "other dtypes" else mine[0]
    path = pin_real(pinned, p=p)
    if case == "missing":  # a file edited by hand: the entry is dropped, saying so
        doc = json.load(open(path))
        doc["entries"][_cache.problem_key(p)]["kernel"] = "sm90_no_such_kernel"
        json.dump(doc, open(path, "w"))
        _cache.reset()
        with pytest.warns(RuntimeWarning, match="sm90_no_such_kernel is missing from this build"):
            assert ranked(selector, p) == ranked(selector, p, tuned=False)
        return
    reason = "16-byte alignment" if case == "misaligned" else "computes"
    with pytest.raises(errors.UnsupportedError) as e:
        ranked(selector, p)
    assert pinned.name in str(e.value) and path in str(e.value) and reason in str(e.value)


# ---- strict mode --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "made_on", [None, {"gpu": "NVIDIA H100 80GB HBM3"}, {"driver": 12040}, {"build": b'{"abi": 0}'}]
)
def test_strict_mode_refuses_a_stale_or_missing_cache(made_on, selector, monkeypatch):
    mine, _ = real_kernels()
    if made_on is not None:  # a cache of another device key (not the fixture's patched one)
        other = _cache._query_device(FakeLib(**made_on), 0, NAMES)
        key = _cache.problem_key(problem())
        _cache.store(other, {key: {"kernel": mine[-1].name, "us": 1.0, "pinned": True}})
        _cache.reset()
    untuned = ranked(selector, tuned=False)
    assert ranked(selector) == untuned  # lenient: the table chooses again
    _cache.reset()
    monkeypatch.setenv(_cache.STRICT_ENV, "1")
    with pytest.raises(errors.UnsupportedError, match="PYCUTLASS_RT_STRICT=1") as e:
        ranked(selector)
    expect = "only caches made elsewhere" if made_on else "no tuned cache at all"
    assert expect in str(e.value) and "NVIDIA H200" in str(e.value)
    with _cache.bypassed():  # tune() recording a callable
        assert ranked(selector) == untuned
    pin_real(mine[-1], pinned=False)  # a current cache: fine, for tuned and untuned problems
    assert ranked(selector)[0][0] == mine[-1].name
    assert ranked(selector, problem(m=8)) == ranked(selector, problem(m=8), tuned=False)


# ---- tune() -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "item, expect",
    [
        ((16, 4096, 4096), _tune.Spec(16, 4096, 4096)),
        ([1, 2, 3], _tune.Spec(1, 2, 3)),
        (
            {"m": 8, "n": 16, "k": 32, "dtype": "float16"},
            _tune.Spec(8, 16, 32, "float16", "float16"),
        ),
        (
            {"m": 8, "n": 16, "k": 32, "out_dtype": "float32", "layout": "nt"},
            _tune.Spec(8, 16, 32, "bfloat16", "float32", "nt"),
        ),
        ({"m": 8, "n": 16, "k": 32, "dtype": "int8"}, _tune.Spec(8, 16, 32, "int8", "int32")),
        (
            {"m": 8, "n": 16, "k": 32, "dtype": "float8_e4m3fn"},
            _tune.Spec(8, 16, 32, "float8_e4m3fn", "bfloat16"),
        ),
    ],
)
def test_spec_of(item, expect):
    assert _tune.spec_of(item) == expect


def test_tf32_specs_time_float32_tensors_with_tf32_math():
    s = _tune.spec_of({"m": 8, "n": 16, "k": 32, "dtype": "tfloat32"})
    assert (s.out_dtype, s.tensor_dtype, s.math) == ("float32", "float32", "tf32")
    assert _tune.spec_of((8, 16, 32), dtype="float32").math is None


@pytest.mark.parametrize(
    "item, error",
    [
        ((0, 1, 1), errors.InvalidArgumentError),
        ((1.5, 2, 3), errors.InvalidArgumentError),
        ((1, 2), errors.InvalidArgumentError),
        ({"m": 1, "n": 1, "k": 1, "x": 2}, errors.InvalidArgumentError),
        ({"m": 1, "n": 1, "k": 1, "dtype": "float32", "out_dtype": "float16"}, errors.DTypeError),
        ({"m": 1, "n": 1, "k": 1, "dtype": "int4"}, errors.DTypeError),
        ({"m": 1, "n": 1, "k": 1, "layout": "tx"}, errors.InvalidArgumentError),
    ],
)
def test_spec_of_rejects(item, error):
    with pytest.raises(error):
        _tune.spec_of(item)


@pytest.mark.parametrize(
    "fields, spec",
    [
        ({}, dict(offsets=(0, 0, 0, 0), c_dtype=None)),
        ({"align_a": 2, "align_d": 4}, dict(offsets=(1, 0, 0, 2), c_dtype=None)),
        ({"c_mode": 1, "dtype_c": BF16, "align_c": 16}, dict(c_dtype="bfloat16", c_layout="t")),
        (
            {"c_mode": 2, "dtype_c": 3, "align_c": 8},
            dict(c_dtype="float32", c_layout="n", offsets=(0, 0, 2, 0)),
        ),
    ],
)
def test_recorded_problems_are_rebuilt_exactly(fields, spec):
    s = _tune.spec_from_problem(problem(**fields))
    assert (s.m, s.n, s.k, s.dtype, s.layout) == (16, 4096, 4096, "bfloat16", "tn")
    assert all(getattr(s, f) == v for f, v in spec.items())


def test_recording_collects_each_problem_once(cache_dir, monkeypatch):
    """Inside recording(), each problem the library ranks for a launch (what its observer
    is called with: built here, as pcr_gemm would on a GPU) is collected once; the
    library forgets its choices on the way in and out, and the watch ends with the block."""
    from pycutlass_rt import _lib

    lib = _lib.load()
    clears = []
    real_clear = lib.pcr_select_clear
    monkeypatch.setattr(lib, "pcr_select_clear", lambda: clears.append(1) or real_clear())
    monkeypatch.setenv(_cache.STRICT_ENV, "1")  # no cache: would refuse outside recording
    ranked_one = (_abi.Ranked * 1)(_abi.Ranked(candidate=0))

    def model():
        for m in (16, 64, 16):
            _select._observed(ctypes.pointer(problem(m=m)), ranked_one, 1, -1, None)

    problems = _tune.record(lib, model)
    assert [p.m for p in problems] == [16, 64] and len(clears) == 2
    assert not _select._selector.watchers
    with pytest.raises(RuntimeError), _tune.recording(lib):
        raise RuntimeError("the model failed")
    assert not _select._selector.watchers


class FakeBackend:
    name = "fake"

    def device(self, index):
        return contextlib.nullcontext()

    def operand(self, rows, cols, layout, dtype, pad=0, *, offset=0, fill=True):
        return rows


def fake_tuning(monkeypatch, lib, times):
    """tune() on fakes: operands carry m, timing is ``times[kernel]``."""
    monkeypatch.setattr(_tune._lib, "load", lambda: lib)
    monkeypatch.setattr(_tune, "backend", FakeBackend)
    monkeypatch.setattr(_kernels, "kernels", lambda: KERNELS)
    monkeypatch.setattr(
        _tune, "describe", lambda lib_, ops: _call.Judged(problem(m=ops.sets[0][0]), lib.verdicts())
    )
    monkeypatch.setattr(_tune.Operands, "call", lambda self, name: name)
    # the library ranks its own kernels only: the fakes' table order, as it would give it
    monkeypatch.setattr(_tune, "candidates", lambda lib_, judged, problem=None: [BIG, SMALL, SK])

    def time_us(bk, name, repeats):
        if times[name] is None:
            raise errors.CudaError("cudaErrorLaunchFailure")
        return times[name]

    monkeypatch.setattr(_tune, "time_us", time_us)


@pytest.mark.parametrize("strict", [False, True])
def test_tune_measures_persists_and_selection_follows(strict, cache_dir, monkeypatch):
    lib = FakeLib()
    fake_tuning(monkeypatch, lib, {BIG.name: 20.0, SK.name: 8.0, SMALL.name: None})
    result = _tune.tune([(16, 4096, 4096)], strict=strict)
    (t,) = result
    assert (t.kernel, t.us, t.table_kernel, t.table_us) == (SK.name, 8.0, BIG.name, 20.0)
    assert t.gain == pytest.approx(2.5) and t.pinned == strict
    assert "cudaErrorLaunchFailure" in t.failed[SMALL.name]
    assert result.cache_files == [_cache.path_for(dev_of(lib))] and lib.clears == 1
    assert "gain 2.50x" in str(result)
    entry = json.load(open(result.cache_files[0]))["entries"][t.problem]
    assert entry["kernel"] == SK.name and entry["pinned"] is strict
    _cache.reset()  # a new process reads the file (what the library is then handed: above)
    assert _cache.loaded(dev_of(lib)).entries[t.problem]["kernel"] == SK.name


def test_tune_without_cache_only_measures(cache_dir, monkeypatch):
    lib = FakeLib()
    fake_tuning(monkeypatch, lib, {BIG.name: 5.0, SK.name: 8.0, SMALL.name: 9.0})
    (t,) = _tune.tune([16, 4096, 4096], cache=False)
    assert t.kernel == BIG.name and t.gain == 1.0 and not os.path.exists(cache_dir)


def test_tune_rejects_bad_input_before_measuring(monkeypatch):
    monkeypatch.setattr(_tune._lib, "load", lambda: FakeLib())
    with pytest.raises(errors.InvalidArgumentError):
        _tune.tune({"m": 1, "n": 1, "k": 1})
    with pytest.raises(errors.DTypeError):
        _tune.tune([(1, 1, 1)], dtype="float64", out_dtype="float16")


def test_grouped_problems_are_reported_not_tuned():
    """A recorded grouped (MoE) problem has no single-GEMM stand-in: tune says so."""
    p = problem(m=8192, n=4096, k=4096, grouped=2, batch=16)
    tuned, target = _tune.tune_one(FakeLib(), None, None, p)
    assert target is p and tuned.kernel is None and "grouped GEMMs are not tuned" in tuned.note
    assert tuned.problem.endswith(" grouped=2 scale_m=0 scale_n=0")  # the MoE form


def test_problem_key_spells_every_identity_field_of_the_memo(lib):
    """The tune cache keys on the C memo's own identity list: problems that differ in any
    of its fields (activation, scales and staging included) never share a cached kernel."""
    names = lib.pcr_problem_identity_names().decode().split()
    assert {"activation", "scale_m", "scale_n", "staged", "epilogue", "batch"} <= set(names)
    base = problem(batch=1)
    keys = {_cache.problem_key(base)}
    for name in names:
        other = Problem.from_buffer_copy(base)
        # a convolution's geometry: fields of the nested pcr_conv_shape ("conv.n")
        *inner, field = name.split(".")
        owner = getattr(other, inner[0]) if inner else other
        value = getattr(owner, field)
        setattr(owner, field, 1 - value if name.startswith("layout") else value + 1)
        keys.add(_cache.problem_key(other))
    assert len(keys) == len(names) + 1, "some identity field leaves the key unchanged"


def test_cache_files_of_the_older_key_format_are_ignored_with_a_warning(cache_dir):
    """Format 1 keys lacked fields of the identity: such a file is ignored, with a warning."""
    dev = {"gpu": "X", "sm_count": 1, "driver": 1, "build": "b"}
    path = _cache.path_for(dev)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"kind": _cache.KIND, "format": 1, "device": dev, "entries": {}}, f)
    with pytest.warns(RuntimeWarning, match="format 1, this version reads 2"):
        assert _cache.read(path, dev) is None


def _file_with(entries):
    return {"kind": _cache.KIND, "format": _cache.FORMAT, "device": {}, "entries": entries}


@pytest.mark.parametrize(
    "doc, why",
    [
        ("[" * 100000 + "]" * 100000, "unreadable"),  # json raises RecursionError on it
        (json.dumps(_file_with({"p": {"kernel": "k", "pinned": "false"}})), "malformed"),
        (json.dumps(_file_with({"p": {"kernel": "k", "us": "fast"}})), "malformed"),
        (json.dumps(_file_with({"p": {"kernel": "k", "candidates": True}})), "malformed"),
        (json.dumps(_file_with({"p": {"kernel": 3}})), "malformed"),
    ],
)
def test_hostile_files_are_ignored_with_a_warning(tmp_path, doc, why):
    path = tmp_path / "cache.json"
    path.write_text(doc)
    with pytest.warns(RuntimeWarning, match=why):
        assert _cache.read(str(path)) is None


def test_oversized_files_are_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(_cache, "MAX_BYTES", 64)
    path = tmp_path / "cache.json"
    path.write_text(json.dumps(_file_with({f"p{i}": {"kernel": "k"} for i in range(9)})))
    with pytest.warns(RuntimeWarning, match="larger than"):
        assert _cache.read(str(path)) is None


def test_well_typed_entries_are_read(tmp_path):
    entry = {
        "kernel": "k",
        "us": 1.5,
        "table_kernel": None,
        "table_us": None,
        "candidates": 3,
        "pinned": False,
        "date": "2026-12-03",
    }
    path = tmp_path / "cache.json"
    path.write_text(json.dumps(_file_with({"p": entry})))
    assert _cache.read(str(path)).entries == {"p": entry}


def _store_many(args):
    directory, worker = args
    os.environ[_cache.DIR_ENV] = directory
    dev = {"gpu": "X", "sm_count": 1, "driver": 1, "build": "b"}
    for i in range(20):
        _cache.store(dev, {f"w{worker}-{i}": {"kernel": "k", "us": 1.0}})


def test_concurrent_writers_keep_each_others_entries(tmp_path):
    """Writers take the lock in turn: four processes' 80 entries all reach the file."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        pool.map(_store_many, [(str(tmp_path), w) for w in range(4)])
    (path,) = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    assert len(json.loads(path.read_text())["entries"]) == 80


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"layout_a": 1, "layout_b": 0, "dtype_c": BF16, "c_mode": 1, "align_c": 8},
        {"out_scale": 1, "scale_m": 3, "scale_n": 4, "epilogue": 2},
        {"grouped": 2, "m": 5000},
        {"op": 1, "layout_a": 2, "layout_b": 2},  # a convolution: its geometry spelled out
    ],
)
def test_problem_keys_read_back_into_the_identity_the_library_keys_on(fields):
    """The cache's keys (text) are read back into pcr_problem_identity's values, which
    the library's selector looks tuned entries up by: the round trip is exact."""
    from pycutlass_rt._abi import ConvShape

    p = problem(**fields)
    if fields.get("op"):
        p.conv = ConvShape(
            n=2,
            h=14,
            w=14,
            c=64,
            k=128,
            r=3,
            s=3,
            p=14,
            q=14,
            pad_h=1,
            pad_w=1,
            stride_h=1,
            stride_w=1,
            dilation_h=1,
            dilation_w=1,
            groups=1,
        )
    key = _cache.problem_key(p)
    assert _cache.identity_of(key) == _cache._identity_values(p)
    assert _cache.identity_of(key + " x=1") is None and _cache.identity_of(key[:-1] + "9x") is None
