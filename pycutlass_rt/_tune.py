"""pycutlass_rt.tune: time the candidate kernels on this GPU and remember the fastest.

Also the measuring half of heuristics/sweep.py: operands in the problem's exact layout
and alignment, and CUDA-graph timing, so that small kernels are timed without the host's
per-call cost in between. The framework that makes and times them (torch, else cupy) is
an adapter of ``_backends``, shared with the benchmark.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import itertools
import math
import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _backends, _cache, _kernels, _lib, _select, errors
from ._abi import CMode, Dtype, Grouped, Op, ScaleKind
from ._dtypes import DTYPE_BYTES, DTYPE_NAMES, dtype_name
from ._kernels import layout_word

DEFAULT_REPEATS = 10
#: input dtype -> the outputs tune() accepts for it (the build may hold fewer: the library's
#: error then lists what it has). "tfloat32": float32 tensors multiplied with math="tf32".
OUTPUTS = {
    "float16": ("float16", "float32"),
    "bfloat16": ("bfloat16", "float32"),
    "float32": ("float32",),
    "tfloat32": ("float32",),
    "float64": ("float64",),
    "int8": ("int32", "int8", "float16", "bfloat16"),
    "float8_e4m3fn": ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2"),
    "float8_e5m2": ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2"),
}
INPUT_DTYPES = tuple(OUTPUTS)
LAYOUTS = ("tn", "nn", "nt", "tt")
ROTATE_BYTES = 256 << 20  # cycle operand copies until this many bytes: L2 cannot hold them
MAX_COPIES = 8
GRAPH_TARGET_US = 1000.0  # one timed graph replay lasts about this long
MAX_INNER = 200


# ---- what is tuned ----------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """Operands to build for one problem (canonical: D row-major)."""

    m: int
    n: int
    k: int
    dtype: str = "bfloat16"
    out_dtype: str = "bfloat16"
    layout: str = "tn"  # A then B: t = row-major, n = column-major
    c_dtype: str | None = None  # None: no C (beta = 0)
    c_layout: str = "t"
    offsets: tuple = (0, 0, 0, 0)  # elements by which a, b, c, d start past an aligned base
    #: dequantizing scales of the canonical rows and columns, as pcr_problem's scale_m and
    #: scale_n (ScaleKind: none, one value, a vector; timed with float32 tensors of ones)
    scales: tuple = (ScaleKind.SCALE_NONE, ScaleKind.SCALE_NONE)

    @property
    def math(self) -> str | None:
        return "tf32" if self.dtype == "tfloat32" else None

    @property
    def tensor_dtype(self) -> str:
        """The dtype of a and b as tensors."""
        return "float32" if self.dtype == "tfloat32" else self.dtype

    def bytes(self) -> int:
        i, o = DTYPE_BYTES[self.dtype], DTYPE_BYTES[self.out_dtype]
        c = DTYPE_BYTES[self.c_dtype] if self.c_dtype else 0
        return (self.m * self.k + self.k * self.n) * i + self.m * self.n * (o + c)


def spec_of(
    item, dtype: str = "bfloat16", out_dtype: str | None = None, layout: str = "tn"
) -> Spec:
    """A Spec from (m, n, k) or {"m", "n", "k"[, "dtype", "out_dtype", "layout"]}.

    Example:
        >>> spec_of((16, 4096, 4096)).out_dtype
        'bfloat16'
        >>> spec_of({"m": 8, "n": 8, "k": 8, "dtype": "float16", "out_dtype": "float32"}).layout
        'tn'
    """
    if isinstance(item, dict):
        unknown = set(item) - {"m", "n", "k", "dtype", "out_dtype", "layout"}
        if unknown:
            raise errors.InvalidArgumentError(f"tune: unknown keys {sorted(unknown)} in {item!r}")
        dtype = item.get("dtype", dtype)
        out_dtype = item.get("out_dtype", out_dtype if "dtype" not in item else None)
        layout = item.get("layout", layout)
        item = tuple(item.get(x) for x in "mnk")
    try:
        m, n, k = (int(x) for x in item)
        if (m, n, k) != tuple(item) or min(m, n, k) < 1:
            raise ValueError
    except (TypeError, ValueError):
        raise errors.InvalidArgumentError(
            f"tune: a shape is (m, n, k) of positive integers or a dict with m, n, k; got {item!r}"
        ) from None
    dtype = dtype_name(dtype, "tune: dtype")
    out_dtype = (
        dtype_name(out_dtype, "tune: out_dtype") if out_dtype else OUTPUTS.get(dtype, (dtype,))[0]
    )
    if dtype not in OUTPUTS or out_dtype not in OUTPUTS[dtype]:
        raise errors.DTypeError(
            f"tune: got {dtype} -> {out_dtype}; inputs and their outputs are "
            + "; ".join(f"{i} -> {'/'.join(o)}" for i, o in OUTPUTS.items())
        )
    if layout not in LAYOUTS:
        raise errors.InvalidArgumentError(f"tune: layout is one of {LAYOUTS}, got {layout!r}")
    return Spec(m, n, k, dtype, out_dtype, layout)


def spec_from_problem(p) -> Spec:
    """Operands that reproduce a recorded canonical problem, alignments included."""
    names = [
        DTYPE_NAMES[x] if x != Dtype.DTYPE_INVALID else None
        for x in (p.dtype_a, p.dtype_b, p.dtype_c, p.dtype_d)
    ]
    aligns = (p.align_a, p.align_b, p.align_c, p.align_d)
    offsets = tuple(a // DTYPE_BYTES[t] if t and 0 < a < 16 else 0 for a, t in zip(aligns, names))
    c_dtype = names[2] if p.c_mode != CMode.C_NONE else None
    # C_COPIED: C was copied into D first; a column-major C makes that happen again
    return Spec(
        p.m,
        p.n,
        p.k,
        names[0],
        names[3],
        layout_word(p.layout_a, p.layout_b),
        c_dtype,
        "n" if p.c_mode == CMode.C_COPIED else "t",
        offsets,
        (p.scale_m, p.scale_n),
    )


# ---- operands and timing ----------------------------------------------------------------

_Torch, _Cupy = _backends.Torch, _backends.Cupy  # tests force a framework with these


def backend():
    """The framework adapter operands are made and timed with: torch, else cupy.

    Raises:
        NoDeviceError: neither imports with a usable GPU (each one's reason is named).
    """
    bk, why = _backends.load()
    if bk is None:
        raise errors.NoDeviceError(
            f"tune() makes its operands with torch or cupy; neither is usable ({why})"
        )
    return bk


@dataclass
class Operands:
    """Copies of one problem's operands, cycled so that L2 does not hold them all."""

    sets: list  # [(a, b, c, d)]
    beta: float
    extras: dict = field(default_factory=dict)  # math, scale_a, scale_b for gemm()
    conv: object = None  # a convolution's _conv_tensors.Geometry (its tensors packed NHWC)

    def call(self, kernel: str):
        from . import _conv, _gemm

        turn, extras, geo = itertools.cycle(self.sets), self.extras, self.conv

        def run():
            a, b, c, d = next(turn)
            if geo is None:
                _gemm.gemm(a, b, c, d, 1.0, self.beta, kernel=kernel, **extras)
            else:
                views, mth = (a, b, c, d), extras.get("math")
                _conv.run(geo, views, 1.0, self.beta, None, None, mth, None, kernel, False)

        return run


def make_operands(bk, spec: Spec) -> Operands:
    copies = max(1, min(MAX_COPIES, math.ceil(ROTATE_BYTES / max(spec.bytes(), 1))))
    oa, ob, oc, od = spec.offsets
    sets = []
    for _ in range(copies):
        a = bk.operand(spec.m, spec.k, spec.layout[0], spec.tensor_dtype, offset=oa)
        b = bk.operand(spec.k, spec.n, spec.layout[1], spec.tensor_dtype, offset=ob)
        c = (
            bk.operand(spec.m, spec.n, spec.c_layout, spec.c_dtype, offset=oc)
            if spec.c_dtype
            else None
        )
        d = bk.operand(spec.m, spec.n, "t", spec.out_dtype, offset=od)
        sets.append((a, b, c, d))
    extras = {"math": spec.math} if spec.math else {}
    kb = -(-spec.k // 128)
    for name, kind, shape in (
        ("scale_a", spec.scales[0], scale_shapes(spec.m, kb, "a")),
        ("scale_b", spec.scales[1], scale_shapes(spec.n, kb, "b")),
    ):
        if kind != ScaleKind.SCALE_NONE:  # ones: the kernel's cost ignores the values
            extras[name] = bk.ones(*shape[kind])
    return Operands(sets, 1.0 if spec.c_dtype else 0.0, extras)


def scale_shapes(extent: int, kblocks: int, operand: str) -> dict:
    """ScaleKind -> the shape of a's (operand "a", ``extent`` M) or b's ("b", N) scales.

    >>> scale_shapes(300, 4, "b")[ScaleKind.SCALE_BLOCKS], scale_shapes(300, 4, "a")[ScaleKind.SCALE_GROUPS]
    ((4, 3), (300, 4))
    """
    blocks = -(-extent // 128)
    a = operand == "a"
    return {
        ScaleKind.SCALE_TENSOR: (1, 1),
        ScaleKind.SCALE_VECTOR: (extent, 1) if a else (1, extent),
        ScaleKind.SCALE_GROUPS: (extent, kblocks) if a else (kblocks, extent),
        ScaleKind.SCALE_BLOCKS: (blocks, kblocks) if a else (kblocks, blocks),
    }


def conv_operands(bk, p) -> Operands:
    """Copies of a recorded convolution's packed tensors (NHWC activations, KRSC filters),
    in the roles of its pass, cycled like a GEMM's."""
    from ._conv_tensors import Geometry

    cv, op = p.conv, Op(p.op)
    act, out = (cv.n, cv.h, cv.w, cv.c), (cv.n, cv.p, cv.q, cv.k)
    flt = (cv.k, cv.r, cv.s, cv.c // max(cv.groups, 1))
    dims = {Op.OP_FPROP: (act, flt, out), Op.OP_DGRAD: (out, flt, act)}.get(op, (out, act, flt))
    tf32 = p.dtype_a == Dtype.TF32
    dt_in, dt_out = "float32" if tf32 else DTYPE_NAMES[p.dtype_a], DTYPE_NAMES[p.dtype_d]
    size = sum(math.prod(x) for x in dims) * DTYPE_BYTES[dt_in]
    copies = max(1, min(MAX_COPIES, math.ceil(ROTATE_BYTES / max(size, 1))))

    def tensor(shape, dt):
        return bk.operand(math.prod(shape[:3]), shape[3], "t", dt).reshape(shape)

    sets = [
        (tensor(dims[0], dt_in), tensor(dims[1], dt_in), None, tensor(dims[2], dt_out))
        for _ in range(copies)
    ]
    geo = Geometry(
        op,
        (cv.pad_h, cv.pad_w),
        (cv.stride_h, cv.stride_w),
        (cv.dilation_h, cv.dilation_w),
        cv.groups,
    )
    return Operands(sets, 0.0, {"math": "tf32"} if tf32 else {}, geo)


def describe(lib, ops: Operands):
    """The canonical problem the C side makes of the first operand set, with every
    kernel's verdict on those operands (an ``_call.Judged``), through gemm's own Call (a
    convolution's through _conv's)."""
    from . import _call, _conv

    if ops.conv is not None:
        mth = ops.extras.get("math")
        call = _conv.prepare(ops.conv, ops.sets[0], 1.0, ops.beta, None, None, mth, None, None)
        return call.describe(lib)
    return _call.prepare(*ops.sets[0], 1.0, ops.beta, **ops.extras).describe(lib)


def time_us(bk, run, repeats: int = DEFAULT_REPEATS) -> float:
    """Median microseconds per call of ``run``: CUDA-graph replays of back-to-back calls
    (the host's cost per call stays out), or a plain loop where capture fails."""
    run()
    rough = bk.loop_us(run, 3)  # host-bound: an upper bound of the kernel's time
    inner = max(2, min(MAX_INNER, math.ceil(GRAPH_TARGET_US / max(rough, 1e-3))))
    try:
        return statistics.median(bk.graph_us(run, inner, repeats))
    except errors.Error:
        raise
    except Exception:  # capture unsupported here: time a loop instead
        return statistics.median(bk.loop_us(run, inner) for _ in range(repeats))


# ---- results ----------------------------------------------------------------------------


@dataclass
class Tuned:
    """One problem's measurement: the best kernel and what the table would have taken."""

    problem: str  # the canonical problem key (see _cache.problem_key)
    kernel: str | None
    us: float | None
    table_kernel: str | None
    table_us: float | None
    timings: dict = field(default_factory=dict)  # kernel name -> us
    failed: dict = field(default_factory=dict)  # kernel name -> error message
    pinned: bool = False
    note: str = ""

    @property
    def gain(self) -> float | None:
        """How many times faster the tuned kernel is than the table's choice."""
        if self.us and self.table_us:
            return self.table_us / self.us
        return None

    def entry(self) -> dict:
        """The cache entry for this problem."""
        return {
            "kernel": self.kernel,
            "us": round(self.us, 3),
            "table_kernel": self.table_kernel,
            "table_us": None if self.table_us is None else round(self.table_us, 3),
            "candidates": len(self.timings),
            "pinned": self.pinned,
            "date": datetime.date.today().isoformat(),
        }


@dataclass
class TuneResult:
    """What tune() measured, per problem, and where it was written."""

    problems: list  # [Tuned]
    cache_files: list = field(default_factory=list)

    def as_dict(self) -> dict:
        """Every problem's measurement and the cache files, as plain data (``python -m
        pycutlass_rt tune --json``)."""
        return {
            "problems": [dict(dataclasses.asdict(t), gain=t.gain) for t in self.problems],
            "cache_files": list(self.cache_files),
        }

    def __iter__(self) -> Iterator[Tuned]:
        return iter(self.problems)

    def __len__(self) -> int:
        return len(self.problems)

    def __getitem__(self, i: int) -> Tuned:
        return self.problems[i]

    def __str__(self) -> str:
        lines = []
        for t in self.problems:
            if t.kernel is None:
                lines.append(f"{t.problem}: not tuned ({t.note})")
                continue
            gain = f"{t.gain:.2f}x" if t.gain else "n/a"
            lines.append(
                f"{t.problem}\n  best  {t.kernel}  {t.us:.2f} us"
                f"{'  (pinned)' if t.pinned else ''}\n"
                f"  table {t.table_kernel}  "
                f"{'n/a' if t.table_us is None else f'{t.table_us:.2f} us'}  "
                f"gain {gain}" + (f"\n  note  {t.note}" if t.note else "")
            )
        lines += [f"cache: {p}" for p in self.cache_files]
        return "\n".join(lines)


# ---- recording a callable ---------------------------------------------------------------


@contextlib.contextmanager
def recording(lib):
    """Collects every problem the library ranks inside the block (key -> Problem).

    The library forgets its choices first, so problems seen before are ranked again; the
    cache is bypassed meanwhile (a stale cache must not stop a re-tune).
    """
    seen: dict = {}

    def watch(problem, ranked, stale):
        seen.setdefault(_cache.problem_key(problem), problem)

    with _cache.bypassed(), _select.watching(watch):
        yield seen


def record(lib, fn) -> list:
    """Runs ``fn()`` once and returns the problems its GEMM calls selected kernels for."""
    with recording(lib) as seen:
        fn()
    return list(seen.values())


# ---- tuning -----------------------------------------------------------------------------


def candidates(lib, judged, problem=None) -> list:
    """Every kernel whose verdict in ``judged`` (see describe) accepts its problem, in the
    table/model order for ``problem`` (default: the judged one; the cache is ignored)."""
    # the operands timed judge the kernels; the problem tuned orders them
    try:
        return [
            k for k, _ in _select.ranking(lib, problem or judged.problem, judged.array, tuned=False)
        ]
    except errors.UnsupportedError:
        return []


def tune_one(
    lib, bk, spec: Spec, recorded=None, *, repeats: int = DEFAULT_REPEATS, pin: bool = False
) -> tuple[Tuned, _lib.Problem]:
    """Times every candidate for one problem; returns the result and the problem tuned."""
    # one GEMM's operands cannot stand in for a grouped problem
    if recorded is not None and recorded.grouped != Grouped.GROUPED_NONE:
        return Tuned(
            _cache.problem_key(recorded),
            None,
            None,
            None,
            None,
            note="grouped GEMMs are not tuned: the table and model order them",
        ), recorded
    conv = recorded is not None and recorded.op != Op.OP_GEMM
    ops = conv_operands(bk, recorded) if conv else make_operands(bk, spec)
    judged = describe(lib, ops)  # the operands timed: their verdicts screen the kernels
    problem = judged.problem
    target = recorded if recorded is not None else problem
    key = _cache.problem_key(target)
    note = ""
    if _cache.problem_key(problem) != key:
        note = f"timed on {_cache.problem_key(problem)} (operands as close as could be made)"
    ranked = candidates(lib, judged, target)
    if not ranked:
        return Tuned(key, None, None, None, None, note="no kernel of this build runs it"), target
    timings, failed = {}, {}
    for kern in ranked:
        try:
            timings[kern.name] = time_us(bk, ops.call(kern.name), repeats)
        except errors.Error as e:
            failed[kern.name] = str(e)
    if not timings:
        return Tuned(
            key,
            None,
            None,
            ranked[0].name,
            None,
            failed=failed,
            note="every candidate failed to run",
        ), target
    best = min(timings, key=timings.get)
    return Tuned(
        key,
        best,
        timings[best],
        ranked[0].name,
        timings.get(ranked[0].name),
        timings,
        failed,
        pin,
        note,
    ), target


def _problems(lib, shapes_or_callable, dtype, out_dtype, layout):
    """[(Spec, recorded Problem or None)] for the shapes, or for the callable's calls."""
    if callable(shapes_or_callable):
        return [(spec_from_problem(p), p) for p in record(lib, shapes_or_callable)]
    if isinstance(shapes_or_callable, (dict, str)) or not hasattr(shapes_or_callable, "__iter__"):
        raise errors.InvalidArgumentError(
            "tune takes a list of (m, n, k) shapes (or dicts), or a callable that runs GEMMs"
        )
    items = list(shapes_or_callable)
    if items and all(isinstance(x, int) for x in items):
        items = [tuple(items)]  # a single (m, n, k)
    return [(spec_of(x, dtype, out_dtype, layout), None) for x in items]


def tune(
    shapes_or_callable: Iterable[Sequence[int] | Mapping[str, Any]] | Callable[[], object],
    *,
    dtype: str = "bfloat16",
    out_dtype: str | None = None,
    layout: str = "tn",
    device: int = 0,
    repeats: int = DEFAULT_REPEATS,
    cache: bool = True,
    strict: bool = False,
    progress: Callable[[int, int, str], object] | None = None,
) -> TuneResult:
    """Times every candidate kernel on this GPU and remembers the fastest per problem.

    For each problem, the kernels of this build that can run it are timed, each forced
    with ``kernel=``: random operands (torch if it imports, else cupy) in the problem's
    layout and alignment, copies cycled so L2 cannot hold them, back-to-back calls
    replayed from a CUDA graph, median of ``repeats`` replays. The fastest kernel goes
    into the per-device cache, which selection consults before the shipped table: later
    ``gemm`` calls of the same problem take it with no further cost.

    The cache is one JSON file per device key (GPU name, SM count, driver version,
    library build) in ``$PYCUTLASS_RT_CACHE_DIR``, else ``$XDG_CACHE_HOME/pycutlass_rt``,
    else ``~/.cache/pycutlass_rt``. Another GPU, driver or build of the library finds no
    file of its key and selects from the table again. A corrupt or foreign file is
    ignored with a warning; writes are atomic (a temporary file renamed into place).

    Strict mode, for deployments that must run exactly the kernels they were validated
    with: ``strict=True`` pins the entries it writes, so selection for those problems
    never falls back; if the pinned kernel is missing from the build, has no image for
    the device, or cannot implement the problem, the call raises UnsupportedError
    naming the kernel and the cache file. Setting ``PYCUTLASS_RT_STRICT=1`` in the
    environment further makes selection on a device without a current cache (none, or
    only files of another GPU, driver or library build) raise UnsupportedError instead
    of silently re-selecting.

    Args:
        shapes_or_callable: (m, n, k) tuples, or dicts with ``m``, ``n``, ``k`` and
            optionally ``dtype``, ``out_dtype``, ``layout``; or a callable, run once
            while every problem that reaches kernel selection (gemm calls, Gemm plans)
            is recorded, then each recorded problem (dtypes, layouts, alignments, C) is
            tuned on its own device.
        dtype: A's and B's dtype for shapes without their own: a key of ``OUTPUTS``
            ("tfloat32" times float32 tensors with ``math="tf32"``), or the word kernel
            names use for it ("bf16", "tf32", "e4m3"). A callable's problems keep their
            own dtypes, math and dequantizing scales.
        out_dtype: D's dtype, one of ``OUTPUTS[dtype]`` (default: the first), spelled
            either way.
        layout: A then B, "t" row-major, "n" column-major: "tn" is ``a @ w.T`` with
            row-major weights w.
        device: CUDA ordinal the shapes are tuned on.
        repeats: timed graph replays per kernel (the median is kept).
        cache: write the results to the device's cache (False: only measure).
        strict: pin the written entries (see strict mode above).
        progress: None, or a callable ``progress(done, total, problem)`` called before each
            problem is timed (the command line prints it).

    Returns:
        TuneResult: per problem (iterate it), the best kernel and its time, the table's
        choice and its time, and ``gain`` (table time / best time); ``cache_files``.

    Raises:
        InvalidArgumentError, DTypeError: a bad shape, dtype or layout.
        NoDeviceError: no GPU, or neither torch nor cupy.

    Example (on a GPU):
        >>> import torch, pycutlass_rt as pcr
        >>> r = pcr.tune([(16, 4096, 4096)], cache=False)  # measure only: no cache written
        >>> print(r)  # doctest: +ELLIPSIS
        16x4096x4096 bfloat16,bfloat16,-,bfloat16 tn ...
          best  sm..._bf16_bf16_f32_bf16_tn_...  ... us
          table sm..._bf16_bf16_f32_bf16_tn_...
        >>> x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
        >>> w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        >>> r = pcr.tune(lambda: pcr.matmul(x, w.t()), cache=False)  # the GEMMs a model runs
        >>> [t.problem.split()[0] for t in r]
        ['16x4096x4096']
    """
    if not isinstance(repeats, int) or repeats < 1:
        raise errors.InvalidArgumentError(f"tune: repeats must be a positive int, got {repeats!r}")
    lib = _lib.load()
    items = _problems(lib, shapes_or_callable, dtype, out_dtype, layout)
    bk = backend()
    names = [k.name for k in _kernels.kernels()]
    results, per_device = [], {}
    for done, (spec, recorded) in enumerate(items):
        if progress is not None:
            what = f"{spec.m}x{spec.n}x{spec.k} {spec.dtype} -> {spec.out_dtype} {spec.layout}"
            progress(done, len(items), what)
        with bk.device(recorded.device if recorded is not None else device):
            tuned, problem = tune_one(lib, bk, spec, recorded, repeats=repeats, pin=strict)
        results.append(tuned)
        dev = _cache.device_key(lib, problem.device, names)
        if cache and tuned.kernel and dev is not None:
            per_device.setdefault(_cache.path_for(dev), (dev, {}))[1][tuned.problem] = tuned.entry()
    files = [_cache.store(dev, entries) for dev, entries in per_device.values()]
    lib.pcr_select_clear()  # memoized rankings were made without these entries
    return TuneResult(results, files)
