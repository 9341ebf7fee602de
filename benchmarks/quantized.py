"""Group Q: the quantized layers inference serves, against torch's own, on the corpus's
held-out shapes (model families never swept for fitting).

    python -m benchmarks.quantized [--quick] [--sample 4] [--parts] [--out DIR]

Cases, each a linear layer y = x @ w.T (x: M x K tokens, w: N x K):

- ``block_fp8``: DeepSeek-V3's recipe: x and w in e4m3, x's scales per token and 128 of K
  (M-major), w's per 128 x 128 block (its weight_scale_inv, transposed); ours
  ``pcr.gemm(.., scale_a=, scale_b=)`` against ``torch._scaled_mm`` with the same scales
  (BlockWise1x128 x BlockWise128x128, where torch runs it on this GPU) and against bf16
  ``torch.mm`` on the unquantized tensors;
- ``w8a8_fp8`` and ``w8a8_int8``: per-channel weights, activations quantized per token on
  the fly: ours ``pcr.quantize`` + ``pcr.gemm`` (two launches) against bf16 ``torch.mm``;
- ``moe_fp8``: an fp8 MoE layer's GEMM (``MOE_LAYERS``: the expert shapes of Mixtral
  8x7B, Qwen3-30B-A3B and DeepSeek-V3 with 32 local experts, tokens routed top-k with
  skew): x in e4m3 with per-token scales, w (E, N, K) in e4m3 with per-expert per-channel
  scales; ours ``pcr.moe_gemm(.., scale_a=, scale_b=)`` against
  ``torch._scaled_grouped_mm`` with the same scales (where torch runs it on this GPU), a
  loop of ``torch._scaled_mm`` over the experts (the routing as a host list: what a
  framework without grouped fp8 GEMMs runs), and bf16 ``torch._grouped_mm`` on the
  unquantized tensors. Rows are T, the tokens routed (each token once per expert it
  visits);
- ``moe_block_fp8``: the same layers in DeepSeek-V3's recipe: x per token and 128 of K,
  each expert's weight per 128 x 128 block; ours against bf16 ``torch._grouped_mm`` and a
  loop of ``torch._scaled_mm`` with the same block scales (where torch runs that recipe);
- ``quantize``: ``pcr.quantize`` per token-group of 128 at M >= 4096 alone, as memory
  bandwidth (bytes read and written over the device time).

``--parts`` also times ours in pieces, interleaved with the rest (no ratios; listed per
case): a W8A8 layer's quantization and its GEMM alone, and every dense block-scaled kernel
of the build forced by name (where the selector's choice falls among them).

Method (benchmarks/README.md): every contestant timed by CUDA-graph replay of back-to-back
calls, operand sets (weights included) rotated over 2x the L2, contestants interleaved
sample by sample; ratios of median device times, ours over the peer's (> 1: ours faster).
Results go to ``DIR/quantized.json`` with the machine and versions; the summary (geomean
per case and peer, M >= 1024 and all, and the worst five) is printed.

Internal API relied on: ``pycutlass_rt._backends.load`` (the framework adapter the suite
times with).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys

from . import device
from .shapes import HELDOUT
from .timing import Contestant, Settings, device_times, set_count

KINDS = ("block_fp8", "w8a8_fp8", "w8a8_int8", "moe_fp8", "moe_block_fp8")
DEFAULT_L2 = 60 << 20
#: MoE layers' expert GEMMs: (experts, K, N) of up (gate and up fused) and down projections
MOE_LAYERS = {
    "mixtral-8x7b up": (8, 4096, 28672),
    "mixtral-8x7b down": (8, 14336, 4096),
    "qwen3-30b-a3b up": (128, 2048, 1536),
    "qwen3-30b-a3b down": (128, 768, 2048),
    "deepseek-v3/32 up": (32, 7168, 4096),
    "deepseek-v3/32 down": (32, 2048, 7168),
}
#: rows routed to a layer's experts (tokens times top-k)
MOE_ROWS = (256, 1024, 4096, 16384)


def shapes(sample: int, kind: str = "block_fp8") -> list:
    """Every ``sample``-th held-out (M, N, K) whose K takes 16-byte rows of fp8 (TMA); for
    ``moe_fp8`` every (T, N, K, E) of MOE_LAYERS x MOE_ROWS."""
    if kind.startswith("moe_"):
        return [(t, n, k, e) for e, k, n in MOE_LAYERS.values() for t in MOE_ROWS]
    return [s for s in HELDOUT if s[2] % 16 == 0][::sample]


def _routing(torch, t: int, e: int):
    """Rows per expert for t routed rows: skewed (a few hot experts), deterministic."""
    g = torch.Generator().manual_seed(t * 1000 + e)
    share = torch.rand(e, generator=g) ** 2 + 0.05
    counts = (share / share.sum() * t).floor().long()
    counts[0] += t - counts.sum()
    return counts


def _moe_operands(torch, t: int, n: int, k: int, e: int, block: bool = False) -> dict:
    import pycutlass_rt as pcr

    x = torch.rand(t, k, device="cuda", dtype=torch.bfloat16) * 2 - 1
    w = (torch.rand(e, n, k, device="cuda", dtype=torch.bfloat16) * 2 - 1) / math.sqrt(k)
    counts = _routing(torch, t, e)
    if block:  # x per token and 128 of K; each expert's weight_scale_inv, transposed
        qx, sx = pcr.quantize(x, granularity="group")
        qs = [pcr.quantize(w[i], granularity="block") for i in range(e)]
        qw = torch.stack([q for q, _ in qs]).reshape(e * n, k)
        sw = torch.stack([s for _, s in qs]).transpose(1, 2)
    else:
        qw, sw = pcr.quantize(w.reshape(e * n, k), "float8_e4m3fn", "token")
        qx, sx = pcr.quantize(x, "float8_e4m3fn", "token")
        sx, sw = sx.reshape(t), sw.reshape(e, n)
    y = torch.empty(t, n, device="cuda", dtype=torch.bfloat16)
    return {
        "x": x,
        "w": w.transpose(1, 2),  # (E, K, N), K-major
        "qx": qx,
        "sx": sx,
        "qw": qw.reshape(e, n, k).transpose(1, 2),
        "sw": sw,
        "ends": counts.cumsum(0).to(torch.int32).cuda(),
        "counts": counts.tolist(),
        "y": y,
        "y_peer": torch.empty_like(y),
    }


def _moe_contestants(torch, sets: list, block: bool = False) -> list:
    import pycutlass_rt as pcr

    def ours(i):
        s = sets[i]
        pcr.moe_gemm(s["qx"], s["qw"], s["ends"], s["y"], scale_a=s["sx"], scale_b=s["sw"])

    def scaled_grouped_mm(i):
        s = sets[i]
        torch._scaled_grouped_mm(
            s["qx"], s["qw"], s["sx"], s["sw"], offs=s["ends"], out_dtype=torch.bfloat16
        )

    def scaled_mm_loop(i):
        s, start = sets[i], 0
        for e, rows in enumerate(s["counts"]):
            if rows:
                end = start + rows
                sa = s["sx"][start:end] if block else s["sx"][start:end, None]
                sb = s["sw"][e] if block else s["sw"][e][None]
                torch._scaled_mm(s["qx"][start:end], s["qw"][e], sa, sb, out_dtype=torch.bfloat16)
                start = end

    def bf16(i):
        s = sets[i]
        torch._grouped_mm(s["x"], s["w"], offs=s["ends"])

    out = [Contestant("ours", ours), Contestant("torch._scaled_mm loop", scaled_mm_loop)]
    if hasattr(torch, "_scaled_grouped_mm") and not block:
        out.append(Contestant("torch._scaled_grouped_mm", scaled_grouped_mm))
    if hasattr(torch, "_grouped_mm"):
        out.append(Contestant("bf16 torch._grouped_mm", bf16))
    return out


def _moe_check(s: dict) -> float:
    """Our result's relative error against the bf16 layer, expert by expert."""
    start, err, ref_norm = 0, 0.0, 0.0
    for e, rows in enumerate(s["counts"]):
        end = start + rows
        ref = s["x"][start:end].double() @ s["w"][e].double()
        err += float((s["y"][start:end].double() - ref).norm() ** 2)
        ref_norm += float(ref.norm() ** 2)
        start = end
    return math.sqrt(err / max(ref_norm, 1e-30))


def _operands(torch, kind: str, m: int, n: int, k: int):
    """One operand set: the quantized tensors each contestant reads, and the bf16 ones."""
    import pycutlass_rt as pcr

    x = torch.rand(m, k, device="cuda", dtype=torch.bfloat16) * 2 - 1
    w = (torch.rand(n, k, device="cuda", dtype=torch.bfloat16) * 2 - 1) / math.sqrt(k)
    y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    s = {"x": x, "w": w, "y": y, "y_peer": torch.empty_like(y)}
    if kind == "block_fp8":
        s["qx"], s["sx"] = pcr.quantize(x, granularity="group")
        s["qw"], s["sw"] = pcr.quantize(w, granularity="block")
    else:
        dtype = _dtype(kind)
        s["qw"], sw = pcr.quantize(w, dtype, "token")
        s["sw"] = sw.reshape(1, n)  # per output channel: scale_b's columns
        s["qx"], s["sx"] = pcr.quantize(x, dtype, "token")
    return s


def _dtype(kind: str) -> str:
    """A W8A8 case's quantized dtype."""
    return "int8" if kind.endswith("int8") else "float8_e4m3fn"


def _block_gemm(sets: list, kernel: str | None = None):
    """Ours on a block_fp8 case: the block-scaled GEMM (the selector's kernel, or one forced)."""
    import pycutlass_rt as pcr

    def fn(i):
        s = sets[i]
        pcr.gemm(
            s["qx"], s["qw"].t(), None, s["y"], scale_a=s["sx"], scale_b=s["sw"].t(), kernel=kernel
        )

    return fn


def _w8a8_steps(kind: str, sets: list):
    """Ours on a W8A8 case, as served: (the activations quantized per token, the GEMM)."""
    import pycutlass_rt as pcr

    dtype = _dtype(kind)

    def quantize(i):
        s = sets[i]
        pcr.quantize(s["x"], dtype, "token", out=s["qx"], scale_out=s["sx"])

    def gemm(i):
        s = sets[i]
        pcr.gemm(s["qx"], s["qw"].t(), None, s["y"], scale_a=s["sx"], scale_b=s["sw"])

    return quantize, gemm


def contestants(torch, kind: str, sets: list) -> list:
    if kind == "block_fp8":

        def scaled_mm(i):
            s = sets[i]
            torch._scaled_mm(s["qx"], s["qw"].t(), s["sx"], s["sw"].t(), out_dtype=torch.bfloat16)

        out = [Contestant("ours", _block_gemm(sets)), Contestant("torch._scaled_mm", scaled_mm)]
    else:
        quantize, gemm = _w8a8_steps(kind, sets)

        def ours(i):
            quantize(i)
            gemm(i)

        out = [Contestant("ours", ours)]

    def bf16(i):
        s = sets[i]
        torch.mm(s["x"], s["w"].t(), out=s["y_peer"])

    return out + [Contestant("bf16 torch.mm", bf16)]


PART = "part: "  # a contestant timing one piece of ours: no ratio, listed with --parts


def parts(torch, kind: str, sets: list) -> list:
    """Ours in pieces (``--parts``), each timed alone: a W8A8 layer's quantization and its
    GEMM; for block_fp8, every dense block-scaled kernel of the build forced by name."""
    import pycutlass_rt as pcr

    if kind == "block_fp8":
        return [
            Contestant(PART + k.name, _block_gemm(sets, k.name))
            for k in pcr.kernels()
            if k.scale_m == "groups" and not k.grouped and k.epilogue == "linear"
        ]
    if kind.startswith("moe_"):
        return []
    quantize, gemm = _w8a8_steps(kind, sets)
    return [Contestant(PART + "quantize", quantize), Contestant(PART + "gemm", gemm)]


def check(torch, kind: str, s: dict) -> float:
    """Our result's relative error against the bf16 layer (the quantization's, mostly)."""
    ref = s["x"].double() @ s["w"].double().t()
    return float((s["y"].double() - ref).norm() / ref.norm())


def run_case(torch, fw, kind, shape, settings, l2, with_parts: bool = False) -> dict:
    m, n, k = shape[:3]
    rec = {"kind": kind, "m": m, "n": n, "k": k}
    moe = kind.startswith("moe_")
    if moe:
        rec["experts"] = shape[3]
    try:
        make = (
            (lambda: _moe_operands(torch, *shape, block=kind == "moe_block_fp8"))
            if moe
            else (lambda: _operands(torch, kind, m, n, k))
        )
        first = make()
        set_bytes = sum(t.numel() * t.element_size() for t in first.values() if torch.is_tensor(t))
        nsets = set_count(set_bytes, l2, settings)
        free = torch.cuda.mem_get_info()[0]
        nsets = max(1, min(nsets, int(0.4 * free // max(set_bytes, 1))))
        sets = [first] + [make() for _ in range(nsets - 1)]
        cs = (
            _moe_contestants(torch, sets, kind == "moe_block_fp8")
            if moe
            else contestants(torch, kind, sets)
        ) + (parts(torch, kind, sets) if with_parts else [])
        for c in cs:  # each once (a peer that cannot run this case drops out), then the check
            try:
                c.fn(0)
            except Exception as e:  # noqa: BLE001 - torch's fp8 routes vary by device
                rec.setdefault("unavailable", {})[c.name] = f"{type(e).__name__}: {e}"[:200]
        cs = [c for c in cs if c.name not in rec.get("unavailable", {})]
        torch.cuda.synchronize()
        rec["rel_err"] = _moe_check(first) if moe else check(torch, kind, first)
        times = device_times(fw, cs, nsets, settings, graph=True)
        rec["sets"] = nsets
        rec["us"] = {name: st.median_us for name, st in times.items()}
        rec["method"] = {name: st.method for name, st in times.items()}
        rec["errors"] = {c.name: c.errors for c in cs if c.errors}
        ours = rec["us"].get("ours")
        rec["ratio"] = {
            name: us / ours
            for name, us in rec["us"].items()
            if name != "ours" and not name.startswith(PART) and ours
        }
    except Exception as e:  # noqa: BLE001 - one failing case must not stop the run
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        torch.cuda.empty_cache()
    return rec


def quantize_bandwidth(torch, fw, settings) -> list:
    import pycutlass_rt as pcr

    out = []
    for m, k in ((4096, 7168), (8192, 7168), (16384, 4096), (4096, 2048)):
        for gran in ("group", "token"):
            x = torch.rand(m, k, device="cuda", dtype=torch.bfloat16)
            q, s = pcr.quantize(x, granularity=gran)
            c = Contestant(
                "quantize",
                lambda i, x=x, q=q, s=s, g=gran: pcr.quantize(x, granularity=g, out=q, scale_out=s),
            )
            us = device_times(fw, [c], 1, settings, graph=True)["quantize"].median_us
            moved = x.numel() * 2 + q.numel() + s.numel() * 4
            out.append(
                {"m": m, "k": k, "granularity": gran, "us": us, "tb_per_s": moved / us / 1e6}
            )
    return out


def geomean(values) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in values)) if values else float("nan")


def _label(rec: dict) -> str:
    """M x N x K, and E experts for a MoE case."""
    shape = f"{rec['m']}x{rec['n']}x{rec['k']}"
    return shape + (f"xE{rec['experts']}" if "experts" in rec else "")


def summarize(records: list) -> list:
    lines = []
    for kind in KINDS:
        recs = [r for r in records if r["kind"] == kind and "ratio" in r]
        peers = sorted({p for r in recs for p in r["ratio"]})
        for peer in peers:
            pairs = [(r, r["ratio"][peer]) for r in recs if peer in r["ratio"]]
            big = [x for r, x in pairs if r["m"] >= 1024]
            worst = sorted(pairs, key=lambda p: p[1])[:5]
            lines.append(
                f"{kind:10s} vs {peer:18s} geomean {geomean([x for _, x in pairs]):5.3f} "
                f"(M>=1024: {geomean(big):5.3f}, {len(big)} shapes) of {len(pairs)}; worst "
                + ", ".join(f"{_label(r)} {x:.2f}" for r, x in worst)
            )
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples (5), shorter ones")
    ap.add_argument("--sample", type=int, default=1, help="every n-th held-out shape")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--out", default=None, help="directory for quantized.json")
    ap.add_argument(
        "--parts",
        action="store_true",
        help="also time ours in pieces: W8A8's quantization and GEMM alone, every "
        "block-scaled kernel forced",
    )
    args = ap.parse_args(argv)
    import torch

    from pycutlass_rt import _backends

    fw, why = _backends.load("torch")
    if fw is None:
        print(f"benchmarks.quantized needs torch with a GPU: {why}", file=sys.stderr)
        return 1
    import pycutlass_rt as pcr

    settings = Settings.make(quick=args.quick)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size or DEFAULT_L2
    out_dir = args.out or os.path.join("bench-results", f"quantized-{datetime.date.today()}")
    os.makedirs(out_dir, exist_ok=True)
    result = {
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "machine": {"gpu": torch.cuda.get_device_name(0), "smi_before": device.nvidia_smi()},
        "versions": {
            "pycutlass_rt": pcr.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "build": pcr.info()["build"],
        },
        "records": [],
    }
    todo = [(kind, s) for kind in args.kinds.split(",") for s in shapes(args.sample, kind)]
    for i, (kind, shape) in enumerate(todo):
        rec = run_case(torch, fw, kind, shape, settings, l2, args.parts)
        result["records"].append(rec)
        ratios = " ".join(f"{p} {x:.3f}" for p, x in rec.get("ratio", {}).items())
        print(
            f"[{i + 1}/{len(todo)}] {kind} {_label(rec)}: {ratios or rec.get('error')}", flush=True
        )
        if args.parts and "us" in rec:
            print(
                "    us: "
                + ", ".join(
                    f"{name.removeprefix(PART)} {us:.1f}" for name, us in rec["us"].items()
                ),
                flush=True,
            )
    result["quantize"] = quantize_bandwidth(torch, fw, settings)
    result["machine"]["smi_after"] = device.nvidia_smi()
    result["summary"] = summarize(result["records"])
    with open(os.path.join(out_dir, "quantized.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("\n".join(result["summary"]))
    for q in result["quantize"]:
        print(
            f"quantize {q['granularity']:5s} {q['m']}x{q['k']}: {q['us']:.1f} us, "
            f"{q['tb_per_s']:.2f} TB/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
