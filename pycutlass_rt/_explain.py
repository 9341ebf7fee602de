"""explain(): which kernel a call takes, why, and why not the others; nothing launched."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from . import _call, _kernels, _lib, _select
from ._abi import PCR_KERNEL_SELECT, BiasAxis, CMode, Epilogue, Op, ScaleKind, Staged
from ._kernels import kernels
from .errors import Error, InvalidArgumentError


@dataclass
class Explanation:
    """What :func:`gemm` (or a convolution: ``conv2d(..., explain=True)``) would do with
    these operands, and why."""

    kernel: str | None
    reason: str
    problem: dict
    ranked: list = field(default_factory=list)  # [(name, why)]
    rejected: list = field(default_factory=list)  # [(name, reason)]
    notes: list = field(default_factory=list)

    def as_dict(self) -> dict:
        """Every field as plain data (``python -m pycutlass_rt explain --json``)."""
        return asdict(self)

    def __str__(self) -> str:
        p = self.problem
        batch = f"{p['batch']} x " if p["batch"] != 1 else ""
        what = f"{p['op']} (implicit GEMM) " if p["op"] != "gemm" else batch
        lines = [
            f"problem: {what}{p['m']}x{p['n']}x{p['k']} {p['dtype_a']} x {p['dtype_b']} "
            f"-> {p['dtype_d']}, layout {p['layout']}"
            f"{' (computed as D^T = B^T A^T)' if p['transposed'] else ''}",
            f"kernel:  {self.kernel}  ({self.reason})",
        ]
        lines += [f"note:    {n}" for n in self.notes]
        lines += [f"  then   {name}  ({why})" for name, why in self.ranked[1:]]
        # kernels of other dtypes or layouts are not worth a line each
        near = [
            (n, w)
            for n, w in self.rejected
            if not w.startswith(
                ("dtypes", "layout", "epilogue", "grouped", "not a grouped", "a ", "an ")
            )
        ]
        lines += [f"  no     {name}: {why}" for name, why in near]
        if len(self.rejected) > len(near):
            lines.append(
                f"  ({len(self.rejected) - len(near)} kernels of other dtypes, "
                "layouts or epilogues not listed)"
            )
        return "\n".join(lines)


#: how explain() says a problem's scale_m / scale_n and its bias axis
_SCALE_WORDS = {
    ScaleKind.SCALE_NONE: "none",
    ScaleKind.SCALE_TENSOR: "one value",
    ScaleKind.SCALE_VECTOR: "a vector",
    ScaleKind.SCALE_GROUPS: "per row or column and 128 of K",
    ScaleKind.SCALE_BLOCKS: "per 128x128 block",
}
_BIAS_WORDS = {
    BiasAxis.BIAS_NONE: None,
    BiasAxis.BIAS_PER_COLUMN: "bias per column",
    BiasAxis.BIAS_PER_ROW: "bias per row",
}


def explain(
    a,
    b,
    c=None,
    d=None,
    alpha=1.0,
    beta=0.0,
    *,
    bias=None,
    activation=None,
    scale_a=None,
    scale_b=None,
    math=None,
    kernel=None,
    aux=None,
    amax=None,
    scale_d=None,
) -> Explanation:
    """Says which kernel :func:`gemm` picks for these operands, why, and why not the others.

    Nothing is launched. Arguments are those of :func:`gemm`.

    Example (on a GPU):
        >>> import torch, pycutlass_rt as pcr
        >>> a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        >>> print(pcr.explain(a, a, None, torch.empty_like(a)))  # doctest: +ELLIPSIS
        problem: 4096x4096x4096 bfloat16 x bfloat16 -> bfloat16, layout tt
        kernel:  sm..._bf16_bf16_f32_bf16_tt_...
    """
    lib = _lib.load()
    if d is None:
        raise InvalidArgumentError("explain needs d (the output) to know its layout and dtype")
    call = _call.prepare(
        a,
        b,
        c,
        d,
        alpha,
        beta,
        bias=bias,
        activation=activation,
        scale_a=scale_a,
        scale_b=scale_b,
        math=math,
        kernel=kernel,
        aux=aux,
        amax=amax,
        scale_d=scale_d,
    )
    return explanation(lib, call)


def explanation(lib, call) -> Explanation:
    """The :class:`Explanation` of a prepared call (a GEMM's or a convolution's)."""
    judged = call.describe(lib)  # the verdicts the launch would reach on these operands
    problem, forced_index, act = judged.problem, call.kernel, call.activation
    pdict = {f: getattr(problem, f) for f, _ in _lib.Problem._fields_}
    for x in ("a", "b", "c", "d"):
        pdict[f"dtype_{x}"] = _kernels.DTYPE_NAMES.get(pdict[f"dtype_{x}"])
    pdict["layout"] = _kernels.layout_word(problem.layout_a, problem.layout_b)
    pdict["op"] = Op(problem.op).token
    pdict["conv"] = {f: getattr(problem.conv, f) for f, _ in type(problem.conv)._fields_}
    notes = []
    if problem.op != Op.OP_GEMM:
        cv = problem.conv
        notes.append(
            f"convolution {pdict['op']}: x (N, H, W, C) = ({cv.n}, {cv.h}, {cv.w}, {cv.c}), "
            f"w (K, R, S, C/groups) = ({cv.k}, {cv.r}, {cv.s}, {cv.c // max(cv.groups, 1)}), "
            f"y (N, P, Q, K) = ({cv.n}, {cv.p}, {cv.q}, {cv.k}); stride ({cv.stride_h}, "
            f"{cv.stride_w}), padding ({cv.pad_h}, {cv.pad_w}), dilation ({cv.dilation_h}, "
            f"{cv.dilation_w}), groups {cv.groups}"
        )
    if problem.scale_m in (ScaleKind.SCALE_GROUPS, ScaleKind.SCALE_BLOCKS):
        notes.append(
            f"fp8 block scales in the mainloop: row (a) scale {_SCALE_WORDS[problem.scale_m]}, "
            f"column (b) scale {_SCALE_WORDS[problem.scale_n]}; each 128 of K's partial product "
            "is scaled before it is accumulated, in float32"
        )
    elif problem.scale_m != ScaleKind.SCALE_NONE or problem.scale_n != ScaleKind.SCALE_NONE:
        where = (
            "the dequantizing epilogue"
            if problem.epilogue == Epilogue.EPI_SCALED
            else "the linear epilogue (per-tensor scales only)"
        )
        notes.append(
            f"scales in {where}: row scale {_SCALE_WORDS[problem.scale_m]}, "
            f"column scale {_SCALE_WORDS[problem.scale_n]}, read on the GPU"
        )
    if problem.out_scale:
        what = [
            w
            for w, obj in (("max |d| reduced into amax", 8), ("d scaled by scale_d", 9))
            if call.objs[obj] is not None
        ]
        notes.append(
            f"quantized output ({', '.join(what)}): in the kernel's epilogue, amax before "
            f"the output scale, {pdict['dtype_d']} saturating"
        )
    if pdict["dtype_a"] == "tfloat32":
        notes.append("math='tf32': float32 tensors multiplied on TF32 tensor cores")
    elif pdict["dtype_a"] == "float32":
        notes.append("float32 at fp32 accuracy (3xTF32); math='tf32' is faster and coarser")
    elif pdict["dtype_a"] in ("float8_e4m3fn", "float8_e5m2"):
        notes.append(
            "math='fast_accum': fp8 products may be accumulated in the MMA's own precision"
            if problem.fast_accum
            else "fp8 partial sums added into float32 every 128 of K; math='fast_accum' "
            "allows faster kernels that skip it"
        )
    if problem.epilogue != Epilogue.EPI_LINEAR:
        words = _call.activation_words(act) if act.code else None
        what = [x for x in (_BIAS_WORDS[problem.bias], words) if x]
        if call.objs[7] is not None:
            what.append("the pre-activation stored to aux")
        if call.objs[8] is not None:
            what.append("max |d| reduced into amax")
        notes.append(
            f"fused epilogue ({', '.join(what)}): applied in the kernel's epilogue, no extra pass"
        )
    if problem.batch != 1:
        notes.append(f"batch of {problem.batch}: one launch (CUTLASS batch mode)")
    if problem.c_mode == CMode.C_COPIED:
        notes.append(
            "c is first copied into d (other layout, dtype or broadcast strides), "
            "then the kernel reads d as C: one extra pass over d"
        )
    work = bool(problem.m and problem.n and problem.k and problem.batch)
    if not (problem.m and problem.n and problem.batch):
        notes.append("empty output (M, N or the batch is 0): nothing is computed or launched")
    elif problem.k == 0:
        notes.append(
            "K = 0: d = act(beta * c + bias) by an elementwise kernel, no GEMM kernel is launched"
        )
    if problem.host:
        notes.append("host operands: staged through GPU memory, the call synchronizes")
    if problem.staged:
        which = [bit.token for bit in Staged if problem.staged & bit]  # "a", "b", "d"
        notes.append(
            f"{', '.join(which)} not 16-byte aligned (leading dimension or address): "
            "copied through aligned scratch around the kernel, one extra pass each"
        )
    if problem.split_n:
        notes.append(
            f"columns split at {problem.split_n}: those before read b in place, the last "
            f"{problem.n - problem.split_n} (their few columns of b copied) run as a second "
            "launch of the kernel; padding all of N would copy all of b"
        )
    # a problem without GEMM work takes no kernel, whatever the build holds
    refused = None
    try:
        chosen = _select.ranking(lib, problem, judged.array) if work else []
    except Error as e:  # what the call would raise: shown, not raised
        chosen, refused = [], str(e)
    ranked = [(k.name, why) for k, why in chosen]
    rejected = _rejected(lib, judged)
    if forced_index != PCR_KERNEL_SELECT:
        status, why = judged.verdicts[forced_index]
        if status:
            return Explanation(
                None, f"forced kernel rejected: {why}", pdict, ranked, rejected, notes
            )
        name = kernels()[forced_index].name
        return Explanation(name, "forced with kernel=", pdict, ranked, rejected, notes)
    if not work:
        return Explanation(
            None,
            "no GEMM kernel runs: the problem has no GEMM work",
            pdict,
            ranked,
            rejected,
            notes,
        )
    if not ranked:
        return Explanation(None, refused or "no kernel runs it", pdict, ranked, rejected, notes)
    return Explanation(ranked[0][0], ranked[0][1], pdict, ranked, rejected, notes)


def _rejected(lib, judged) -> list:
    """[(name, why)] for the build's kernels the library's ranking of the problem leaves out,
    with its reasons (their verdicts' refusals, or why its selector passed them over)."""
    passed = _select.passed_over(lib, judged.problem, judged.array)
    return [(kern.name, why) for kern, (status, why) in zip(kernels(), passed) if status]
