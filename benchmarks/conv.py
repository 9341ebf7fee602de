"""Convolutions against cuDNN: pycutlass_rt.conv2d, conv2d_dgrad and conv2d_wgrad next to
torch's cuDNN calls, on the layers of ResNet-50, a Stable Diffusion UNet, ViT patch
embeddings, ResNeXt-50's grouped convolutions and the depthwise ones of MobileNet-V2 and
ConvNeXt-T (on the direct grouped and depthwise kernels where the build holds them: the
extended tier) (benchmarks/README.md, "Convolutions")::

    python -m benchmarks.conv [--dtypes float16 bfloat16] [--passes fprop dgrad wgrad]
        [--sets resnet50 unet vit resnext50 mobilenetv2 convnext_t] [--out results.csv]
        [--quick]

The method is the GEMM suite's, through its helpers (``timing``): each side is warmed up
over every operand copy (cuDNN's autotuner, ``cudnn.benchmark``, picks its algorithm on a
first call), then both are timed by CUDA-graph replays, interleaved A B A B, and their
medians compared; operand copies are cycled so that one pass over them spans twice the L2.
Tensors are NCHW logically and channels_last in memory, as pycutlass_rt requires.

Internal API relied on: ``pycutlass_rt._backends`` (the framework adapter, as in the GEMM
suite) and ``pycutlass_rt._conv_gemm.UNFOLD_LAGGING`` (``--no-unfold-lagging``: the routes
with and without the GEMM unfolding of lagging layers); ``--profile``'s launch list is
heuristics/profiling.py's.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import sys
from collections import namedtuple

from heuristics.profiling import launches

from . import timing
from .measure import MEMORY_FRACTION, _err
from .report import geomean
from .suite import DEFAULT_L2, default_out

OURS, PEER = "pycutlass_rt", "cudnn"
PASSES = ("fprop", "dgrad", "wgrad")
DTYPES = ("float16", "bfloat16")
TOLERANCE = 2e-2  # relative (Frobenius) error against torch in fp32, fp16 and bf16 outputs
SLOW = 0.8  # ratios below this are counted: clearly slower than cuDNN


_FIELDS = "name n c h w k r s stride padding dilation groups"


class Layer(namedtuple("Layer", _FIELDS, defaults=(1, 0, 1, 1))):
    """One convolution as torch.nn.Conv2d sees it: x (n, c, h, w), w (k, c/groups, r, s);
    stride, padding and dilation alike in h and w."""

    __slots__ = ()

    def out_hw(self) -> tuple:
        """(P, Q), as torch's conv2d computes them."""
        span = lambda x, f: x + 2 * self.padding - self.dilation * (f - 1) - 1  # noqa: E731
        return span(self.h, self.r) // self.stride + 1, span(self.w, self.s) // self.stride + 1

    def shapes(self) -> tuple:
        """The NCHW shapes of x, w and y."""
        p, q = self.out_hw()
        return (
            (self.n, self.c, self.h, self.w),
            (self.k, self.c // self.groups, self.r, self.s),
            (self.n, self.k, p, q),
        )

    def flops(self) -> int:
        p, q = self.out_hw()
        return 2 * self.n * p * q * self.k * (self.c // self.groups) * self.r * self.s


#: torchvision resnet50 (v1.5: the stride on the 3x3), batch 32 at 224x224: the stem, then
#: per stage the first block's 1x1, strided 3x3 and 1x1/2 projection, and the 1x1, 3x3 and 1x1
#: of the others; each shape once (layer1's projection is its conv3's shape)
RESNET50 = [
    Layer("conv1 7x7/2 3-64", 32, 3, 224, 224, 64, 7, 7, 2, 3),
    Layer("layer1 1x1 64-64", 32, 64, 56, 56, 64, 1, 1),
    Layer("layer1 3x3 64", 32, 64, 56, 56, 64, 3, 3, 1, 1),
    Layer("layer1 1x1 64-256 (conv3, proj)", 32, 64, 56, 56, 256, 1, 1),
    Layer("layer1 1x1 256-64", 32, 256, 56, 56, 64, 1, 1),
    Layer("layer2.0 1x1 256-128", 32, 256, 56, 56, 128, 1, 1),
    Layer("layer2.0 3x3/2 128", 32, 128, 56, 56, 128, 3, 3, 2, 1),
    Layer("layer2.0 proj 1x1/2 256-512", 32, 256, 56, 56, 512, 1, 1, 2),
    Layer("layer2 1x1 128-512", 32, 128, 28, 28, 512, 1, 1),
    Layer("layer2 1x1 512-128", 32, 512, 28, 28, 128, 1, 1),
    Layer("layer2 3x3 128", 32, 128, 28, 28, 128, 3, 3, 1, 1),
    Layer("layer3.0 1x1 512-256", 32, 512, 28, 28, 256, 1, 1),
    Layer("layer3.0 3x3/2 256", 32, 256, 28, 28, 256, 3, 3, 2, 1),
    Layer("layer3.0 proj 1x1/2 512-1024", 32, 512, 28, 28, 1024, 1, 1, 2),
    Layer("layer3 1x1 256-1024", 32, 256, 14, 14, 1024, 1, 1),
    Layer("layer3 1x1 1024-256", 32, 1024, 14, 14, 256, 1, 1),
    Layer("layer3 3x3 256", 32, 256, 14, 14, 256, 3, 3, 1, 1),
    Layer("layer4.0 1x1 1024-512", 32, 1024, 14, 14, 512, 1, 1),
    Layer("layer4.0 3x3/2 512", 32, 512, 14, 14, 512, 3, 3, 2, 1),
    Layer("layer4.0 proj 1x1/2 1024-2048", 32, 1024, 14, 14, 2048, 1, 1, 2),
    Layer("layer4 1x1 512-2048", 32, 512, 7, 7, 2048, 1, 1),
    Layer("layer4 1x1 2048-512", 32, 2048, 7, 7, 512, 1, 1),
    Layer("layer4 3x3 512", 32, 512, 7, 7, 512, 3, 3, 1, 1),
]

#: Stable Diffusion 1.x UNet (diffusers UNet2DConditionModel of stable-diffusion-v1-5), 64x64
#: latents (512x512 images), batch 2 (one image under classifier-free guidance): conv_in,
#: ResNet-block 3x3s and 1x1 skips at 320/640/1280 channels, the stride-2 downsamplers, the
#: up blocks' concatenated inputs (skip + hidden channels), conv_out; each shape once
UNET = [
    Layer("conv_in 3x3 4-320", 2, 4, 64, 64, 320, 3, 3, 1, 1),
    Layer("down0 res 3x3 320 @64", 2, 320, 64, 64, 320, 3, 3, 1, 1),
    Layer("down0 downsample 3x3/2 320", 2, 320, 64, 64, 320, 3, 3, 2, 1),
    Layer("down1 res 3x3 320-640 @32", 2, 320, 32, 32, 640, 3, 3, 1, 1),
    Layer("down1 res 3x3 640 @32", 2, 640, 32, 32, 640, 3, 3, 1, 1),
    Layer("down1 skip 1x1 320-640 @32", 2, 320, 32, 32, 640, 1, 1),
    Layer("down1 downsample 3x3/2 640", 2, 640, 32, 32, 640, 3, 3, 2, 1),
    Layer("down2 res 3x3 640-1280 @16", 2, 640, 16, 16, 1280, 3, 3, 1, 1),
    Layer("down2 res 3x3 1280 @16", 2, 1280, 16, 16, 1280, 3, 3, 1, 1),
    Layer("down2 skip 1x1 640-1280 @16", 2, 640, 16, 16, 1280, 1, 1),
    Layer("down2 downsample 3x3/2 1280", 2, 1280, 16, 16, 1280, 3, 3, 2, 1),
    Layer("down3/mid res 3x3 1280 @8", 2, 1280, 8, 8, 1280, 3, 3, 1, 1),
    Layer("up0 res 3x3 2560-1280 @8", 2, 2560, 8, 8, 1280, 3, 3, 1, 1),
    Layer("up2 res 3x3 1920-640 @32", 2, 1920, 32, 32, 640, 3, 3, 1, 1),
    Layer("up3 res 3x3 960-320 @64", 2, 960, 64, 64, 320, 3, 3, 1, 1),
    Layer("up3 skip 1x1 960-320 @64", 2, 960, 64, 64, 320, 1, 1),
    Layer("conv_out 3x3 320-4", 2, 320, 64, 64, 4, 3, 3, 1, 1),
]

#: ViT patch embeddings (kernel = stride = patch), batch 64: ViT-B/16 at 224 (timm
#: vit_base_patch16_224), ViT-L/14 at 224 (CLIP ViT-L/14), SigLIP So400m/14 at 384 (1152 wide)
VIT = [
    Layer("ViT-B/16 @224 3-768", 64, 3, 224, 224, 768, 16, 16, 16),
    Layer("ViT-L/14 @224 3-1024", 64, 3, 224, 224, 1024, 14, 14, 14),
    Layer("SigLIP-So400m/14 @384 3-1152", 64, 3, 384, 384, 1152, 14, 14, 14),
]

#: ResNeXt-50 32x4d (torchvision resnext50_32x4d), batch 32 at 224x224: the grouped 3x3s of
#: every stage (32 groups of 4, 8, 16, 32 channels), the first block's strided
RESNEXT50 = [
    Layer("layer1 3x3 128 g32", 32, 128, 56, 56, 128, 3, 3, 1, 1, 1, 32),
    Layer("layer2.0 3x3/2 256 g32", 32, 256, 56, 56, 256, 3, 3, 2, 1, 1, 32),
    Layer("layer2 3x3 256 g32", 32, 256, 28, 28, 256, 3, 3, 1, 1, 1, 32),
    Layer("layer3.0 3x3/2 512 g32", 32, 512, 28, 28, 512, 3, 3, 2, 1, 1, 32),
    Layer("layer3 3x3 512 g32", 32, 512, 14, 14, 512, 3, 3, 1, 1, 1, 32),
    Layer("layer4.0 3x3/2 1024 g32", 32, 1024, 14, 14, 1024, 3, 3, 2, 1, 1, 32),
    Layer("layer4 3x3 1024 g32", 32, 1024, 7, 7, 1024, 3, 3, 1, 1, 1, 32),
]


def _depthwise(name, c, hw, r, stride, batches=(32, 1)) -> list:
    """A depthwise convolution (groups = C = K, "same" padding) at each batch size."""
    return [Layer(f"{name} b{n}", n, c, hw, hw, c, r, r, stride, r // 2, 1, c) for n in batches]


#: MobileNet-V2 (torchvision mobilenet_v2) at 224x224: the 3x3 depthwise convolution of
#: every inverted-residual shape (expanded channels, input size, stride), batch 32 and 1
MOBILENETV2 = [
    layer
    for c, hw, stride in [
        (32, 112, 1),
        (96, 112, 2),
        (144, 56, 1),
        (144, 56, 2),
        (192, 28, 1),
        (192, 28, 2),
        (384, 14, 1),
        (576, 14, 1),
        (576, 14, 2),
        (960, 7, 1),
    ]
    for layer in _depthwise(f"dw 3x3{'/2' if stride > 1 else ''} {c} @{hw}", c, hw, 3, stride)
]

#: ConvNeXt-T (torchvision convnext_tiny) at 224x224: each stage's 7x7 depthwise
#: convolution, batch 32 and 1
CONVNEXT_T = [
    layer
    for c, hw in [(96, 56), (192, 28), (384, 14), (768, 7)]
    for layer in _depthwise(f"dw 7x7 {c} @{hw}", c, hw, 7, 1)
]

SETS = {
    "resnet50": RESNET50,
    "unet": UNET,
    "vit": VIT,
    "resnext50": RESNEXT50,
    "mobilenetv2": MOBILENETV2,
    "convnext_t": CONVNEXT_T,
}
FIELDS = (
    "set layer pass dtype n c h w k r s stride padding dilation groups gflop status reason "
    "rel_err cudnn_rel_err ok backend kernel sets method pcr_us cudnn_us ratio notes launches"
).split()


def _tensor(torch, shape, dtype, fill=True):
    """A channels_last tensor: uniform in [-1, 1) (drawn in fp32: never zeros), or empty."""
    kw = dict(device="cuda", memory_format=torch.channels_last)
    if not fill:
        return torch.empty(shape, dtype=dtype, **kw)
    return torch.empty(shape, dtype=torch.float32, **kw).uniform_(-1, 1).to(dtype)  # keeps strides


def operands(torch, layer, dtype, pass_) -> tuple:
    """(a, b, out) of a pass: fprop (x, w, y), dgrad (dy, w, dx), wgrad (dy, x, dw)."""
    x, w, y = layer.shapes()
    a, b, out = {"fprop": (x, w, y), "dgrad": (y, w, x), "wgrad": (y, x, w)}[pass_]
    return _tensor(torch, a, dtype), _tensor(torch, b, dtype), _tensor(torch, out, dtype, False)


def ours(pcr, layer, pass_, **kw):
    """``fn(a, b, out)``: the pass through pycutlass_rt, written into ``out`` (``kw``: e.g.
    explain=True, for the call's Explanation instead)."""
    fn = {"fprop": pcr.conv2d, "dgrad": pcr.conv2d_dgrad, "wgrad": pcr.conv2d_wgrad}[pass_]
    geo = (layer.stride, layer.padding, layer.dilation, layer.groups)
    return lambda a, b, out: fn(a, b, None, *geo, out=out, **kw)  # None: bias, input/weight size


def chosen(pcr, layer, pass_, a, b, out) -> str:
    """The kernel pycutlass_rt runs for the pass, with the route where it is a GEMM's."""
    told = ours(pcr, layer, pass_, explain=True)(a, b, out)
    if told.kernel is None:  # the call itself then raises why, into the row
        return "none"
    route = next((note.split(":")[0] for note in told.notes if "as a GEMM" in note), None)
    return told.kernel + (f" [{route}]" if route else "")


def forward_xw(pass_, a, b, out) -> tuple:
    """The forward pass's (x, w) among a pass's (a, b, out)."""
    return {"fprop": (a, b), "dgrad": (out, b), "wgrad": (b, out)}[pass_]


def cudnn(torch, layer, pass_):
    """``fn(a, b, out) -> result``: torch's one cuDNN call for the pass.

    dgrad and wgrad are ``aten.convolution_backward`` asking for one gradient, which is what
    torch.nn.grad.conv2d_input / conv2d_weight call too (there with an expanded dummy in
    place of the tensor read only for its shape; here ``out`` lends it, channels_last so
    that no operand is copied): a single cuDNN backward-data or backward-filter call.
    """
    geo = ([layer.stride] * 2, [layer.padding] * 2, [layer.dilation] * 2)
    if pass_ == "fprop":
        return lambda a, b, out: torch.nn.functional.conv2d(a, b, None, *geo, layer.groups)
    grad = PASSES.index(pass_) - 1  # dgrad: grad_input (0), wgrad: grad_weight (1)
    mask = [grad == 0, grad == 1, False]

    def backward(a, b, out):
        x, w = forward_xw(pass_, a, b, out)
        return torch.ops.aten.convolution_backward(
            a, x, w, None, *geo, False, [0, 0], layer.groups, mask
        )[grad]

    return backward


def backend(torch, layer, x, w) -> str:
    """The backend torch's dispatcher picks for the layer (forward and backward alike)."""
    geo = ([layer.stride] * 2, [layer.padding] * 2, [layer.dilation] * 2)
    try:
        return str(torch._C._select_conv_backend(x, w, None, *geo, False, [0, 0], layer.groups))
    except Exception as e:  # noqa: BLE001 - a private API: only a note
        return f"unknown ({type(e).__name__})"


def run_case(fw, pcr, layer, dtype, pass_, settings, l2_bytes, profile=False) -> dict:
    """One layer, dtype and pass: the check, then both sides timed; a CSV row (raises on
    failures, which the caller records)."""
    torch = fw.torch
    dt, row = getattr(torch, dtype), {"pass": pass_, "dtype": dtype}
    mine, peer = ours(pcr, layer, pass_), cudnn(torch, layer, pass_)
    first = operands(torch, layer, dt, pass_)
    a, b, out = first
    row["backend"] = backend(torch, layer, *forward_xw(pass_, a, b, out))
    row["kernel"] = chosen(pcr, layer, pass_, a, b, out)
    if profile:
        row["launches"] = launches(torch, lambda: mine(a, b, out))
    fw.poison(out)
    mine(a, b, out)  # pycutlass_rt first: an UnsupportedError skips the layer
    got = peer(a, b, out)  # cudnn.benchmark autotunes here
    flags = dict(enabled=True, benchmark=False, deterministic=False, allow_tf32=False)
    with torch.backends.cudnn.flags(**flags):  # the reference: fp32, without TF32
        ref = peer(a.float(), b.float(), out.float())
    err = fw.rel_err(out, ref)
    row.update(rel_err=err, cudnn_rel_err=fw.rel_err(got, ref), ok=err <= TOLERANCE)
    del got, ref
    per_set = sum(t.numel() * t.element_size() for t in first)
    count = timing.set_count(per_set, l2_bytes, settings)
    count = max(1, min(count, int(MEMORY_FRACTION * fw.free_bytes()) // per_set))
    sets = [first] + [operands(torch, layer, dt, pass_) for _ in range(count - 1)]

    def on_sets(fn):
        def call(i):
            fn(*sets[i])  # returns nothing: a graph's capture keeps no outputs alive

        return call

    contestants = [timing.Contestant(OURS, on_sets(mine)), timing.Contestant(PEER, on_sets(peer))]
    alive = timing.warm_up(fw, contestants, len(sets), settings)
    dev = timing.device_times(fw, alive, len(sets), settings, graph=True)
    notes = [f"{c.name} {k}: {v}" for c in contestants for k, v in c.errors.items()]
    row.update(sets=len(sets), notes="; ".join(notes))
    if OURS in dev and PEER in dev:
        mine_s, peer_s = dev[OURS], dev[PEER]
        row.update(pcr_us=mine_s.median_us, cudnn_us=peer_s.median_us, method=mine_s.method)
        if timing.comparable(mine_s.method, peer_s.method, graph=True):
            row["ratio"] = peer_s.median_us / mine_s.median_us
    return row


def summarize(rows) -> list:
    """Per set, pass and dtype, a line: layers timed, the geometric mean of the ratios, the
    count below ``SLOW``, layers not run (unsupported or failed) and failed checks."""
    groups = {}
    for r in rows:
        groups.setdefault((r["set"], r["pass"], r["dtype"]), []).append(r)
    lines = [f"{'set':9s} {'pass':5s} {'dtype':8s} timed geomean <{SLOW}x not-run mismatches"]
    for (name, pass_, dtype), rs in groups.items():
        ratios = [r["ratio"] for r in rs if r.get("ratio")]
        gm = geomean(ratios)
        lines.append(
            f"{name:9s} {pass_:5s} {dtype:8s} {len(ratios):5d} "
            + (f"{gm:7.2f}" if gm else f"{'-':>7s}")
            + f" {sum(v < SLOW for v in ratios):5d} {sum(r['status'] != 'ok' for r in rs):7d}"
            + f" {sum(r.get('ok') is False for r in rs):10d}"
        )
    return lines


HEADER = f"  {'layer':34s} {'pass':5s} {'dtype':8s} {'pcr µs':>10s} {'cuDNN µs':>10s} {'ratio':>6s}  rel_err"


def _line(r) -> str:
    """A row as the printed table shows it (HEADER's columns)."""
    head = f"  {r['layer']:34s} {r['pass']:5s} {r['dtype']:8s}"
    if r["status"] != "ok":
        return f"{head} {r['status']}: {r['reason']}"
    us = lambda k: f"{r[k]:10.1f}" if k in r else f"{'-':>10s}"  # noqa: E731
    ratio = f"{r['ratio']:6.2f}" if "ratio" in r else f"{'-':>6s}"
    check = "" if r["ok"] else "  CHECK FAILED"
    return f"{head} {us('pcr_us')} {us('cudnn_us')} {ratio}  {r['rel_err']:.1e}{check}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.conv",
        description="pycutlass_rt's conv2d, dgrad and wgrad against cuDNN (through torch) on "
        "ResNet-50, SD UNet, ViT patch-embedding, ResNeXt-50 grouped and MobileNet-V2 and "
        "ConvNeXt-T depthwise layers; ratio = cuDNN time / ours.",
    )
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    p.add_argument("--passes", nargs="+", choices=PASSES, default=list(PASSES))
    p.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    p.add_argument("--out", help="CSV to write (default bench-results/<gpu>-<date>/conv.csv)")
    p.add_argument("--quick", action="store_true", help="3 layers per set, fewer replays")
    p.add_argument(
        "--profile",
        action="store_true",
        help="record in the CSV's 'launches' column the device kernels one call of ours "
        "launches, with their µs (torch's profiler, outside the timed runs)",
    )
    p.add_argument(
        "--no-unfold-lagging",
        action="store_true",
        help="run on the convolution kernels the layers they run badly (too few output tiles "
        "over a long reduction) instead of as GEMMs on unfolded operands: the A/B of that choice",
    )
    return p


def record(fw, pcr, name, layer, dtype, pass_, settings, l2_bytes, profile=False) -> dict:
    """The CSV row of one case; what fails (no kernel for the geometry, a peer) is recorded."""
    geo = layer._asdict()
    row = dict(set=name, layer=geo.pop("name"), gflop=layer.flops() / 1e9, status="ok", **geo)
    try:
        row.update(run_case(fw, pcr, layer, dtype, pass_, settings, l2_bytes, profile))
    except Exception as e:  # noqa: BLE001 - recorded; the run goes on
        status = "unsupported" if isinstance(e, pcr.UnsupportedError) else "error"
        row.update({"pass": pass_, "dtype": dtype, "status": status, "reason": _err(e)})
    try:
        fw.sync()
        fw.free_memory()
    except Exception as e:  # noqa: BLE001 - e.g. a sticky CUDA error
        row.setdefault("reason", _err(e))
    return row


def main(argv=None) -> int:
    """Parses ``argv``, runs the selected layers; the exit status."""
    args = parser().parse_args(argv)
    import pycutlass_rt as pcr
    from pycutlass_rt import _backends, _conv_gemm

    _conv_gemm.UNFOLD_LAGGING = not args.no_unfold_lagging
    try:
        info = pcr.info()
        fw, why = _backends.load("torch") if info["devices"] else (None, "no usable GPU")
    except pcr.LibraryError as e:
        fw, why = None, str(e)
    if fw is None:
        print(f"bench: needs a GPU and torch with CUDA ({why})", file=sys.stderr)
        return 1
    fw.torch.backends.cudnn.benchmark = True
    settings = timing.Settings.make(args.quick)
    dev = fw.device_info()
    l2_bytes = dev.get("l2_bytes") or DEFAULT_L2
    path = args.out or os.path.join(default_out(dev["name"]), "conv.csv")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    print(f"{dev['name']}; ratio = cuDNN µs / pycutlass_rt µs (> 1: pycutlass_rt faster)")
    rows = []
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        for name in args.sets:
            print(f"\n{name}\n{HEADER}")
            layers = SETS[name][:3] if args.quick else SETS[name]
            for layer, dtype, pass_ in itertools.product(layers, args.dtypes, args.passes):
                row = record(fw, pcr, name, layer, dtype, pass_, settings, l2_bytes, args.profile)
                rows.append(row)
                writer.writerow(row)
                f.flush()  # a run cut short keeps its rows
                print(_line(row), flush=True)
    print("\n" + "\n".join(summarize(rows)) + f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
