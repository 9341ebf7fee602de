#!/usr/bin/env python3
"""pycutlass_rt's torch operators against torch.mm and F.linear: host time per call.

    python benchmarks/torch_ops.py                        # every section, bfloat16
    python benchmarks/torch_ops.py --only host --shape 16x4096x4096 --json /tmp/ops.json
    python benchmarks/torch_ops.py --only mlp --tokens 1,16,256,2048

Sections:

- ``host``: eager calls, each way of reaching the same kernel: torch's own (torch.mm,
  F.linear), pycutlass_rt.gemm with the output given (the floor: no allocation, no
  dispatcher), the CUDA implementation called as a function (allocation, checks, no
  dispatcher), and the operator registered in several styles: ``Library.define`` +
  ``Library.impl`` with ``register_autograd`` (what pycutlass_rt.torch uses), without
  autograd, and with an Autograd-key kernel written out; ``torch.library.custom_op`` with
  and without autograd (these copies live in namespaces ``pcr_bench_*`` and run the same
  Python code). Also the modules (nn.Linear against Linear) in
  inference and with parameters that require grad.
- ``compiled``: the same calls inside ``torch.compile`` (``default`` and
  ``reduce-overhead``): host time of one compiled call.
- ``mlp``: device time per call of a Hugging Face MLP block (down(silu(gate(x)) * up(x)),
  Llama-3-8B sizes by default), ``reduce-overhead`` compiled and eager, on
  pycutlass_rt.torch.Linear (SiLU fused into gate's GEMM) against nn.Linear.

Host time is the wall time per call of an unsynchronized loop of ``--calls`` calls (below
the launch queue's depth), on a problem whose GPU time is below its host time; the
median over ``--repeats`` loops, contestants interleaved (A B C A B C ...), with the 10th
and 90th percentiles. Device time: CUDA events around ``--iters`` back-to-back calls.
It needs a GPU, torch with CUDA and a built library (installed, build/, or
PYCUTLASS_RT_LIBRARY).
"""

import argparse
import json
import os
import statistics
import sys
import time

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--only",
        choices=["host", "compiled", "mlp"],
        action="append",
        help="run only these sections (repeatable; default: all)",
    )
    p.add_argument("--shape", default="16x1024x1024", help="MxNxK of the host-time problem")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--calls", type=int, default=300, help="calls per host-time loop")
    p.add_argument("--repeats", type=int, default=9, help="host-time loops per contestant")
    p.add_argument("--tokens", default="1,16,128,1024", help="MLP token counts (comma list)")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--inter", type=int, default=14336)
    p.add_argument("--iters", type=int, default=50, help="calls per device-time sample")
    p.add_argument("--json", help="also write the results to this file")
    return p.parse_args(argv)


def host_times(contestants, calls, repeats, sync):
    """{name: (median, p10, p90)} microseconds per call; contestants interleaved."""
    for fn in contestants.values():  # warm-up: selection, compilation, graph recording
        for _ in range(5):
            fn()
    sync()
    samples = {name: [] for name in contestants}
    for _ in range(repeats):
        for name, fn in contestants.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls * 1e6)
    sync()
    out = {}
    for name, v in samples.items():
        v = sorted(v)
        out[name] = (statistics.median(v), v[len(v) // 10], v[min(len(v) - 1, 9 * len(v) // 10)])
    return out


def print_table(title, results, base):
    print(f"\n{title}")
    width = max(len(n) for n in results)
    ref = results[base][0]
    print(f"  {'':{width}}  {'us/call':>8}  {'p10':>7}  {'p90':>7}  {'/ ' + base}")
    for name, (med, p10, p90) in results.items():
        print(f"  {name:{width}}  {med:8.2f}  {p10:7.2f}  {p90:7.2f}  {med / ref:6.2f}x")


def lean_autograd(torch, op, setup, backward):
    """An Autograd-key kernel written out (an autograd.Function where a gradient is
    needed, else a redispatch below autograd): what register_autograd generates, without
    its generality (defaults filled in, keyword arguments, tensor lists)."""

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            with torch._C._AutoDispatchBelowAutograd():
                out = op(*args)
            setup(ctx, args, out)
            return out

        @staticmethod
        def backward(ctx, *grads):
            return backward(ctx, *grads)

    after = torch._C._after_autograd_keyset

    def kernel(keyset, *args):
        if torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in args
        ):
            return Function.apply(*args)
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & after, *args)

    return kernel


def bench_registrations(torch, pt):
    """The same operators registered in the other styles, on the same Python code."""
    from typing import Optional

    # pycutlass_rt.torch's own implementations, fakes and backward formulas
    cuda, fake, grad = pt._cuda, pt._fake, pt._autograd
    Tensor = torch.Tensor
    made = {}
    for ns, autograd in (
        ("pcr_bench_lib", True),
        ("pcr_bench_lib_noad", False),
        ("pcr_bench_lib_lean", "lean"),
    ):
        lib = torch.library.Library(ns, "DEF")
        lib.define("mm(Tensor a, Tensor b) -> Tensor")
        lib.define("linear(Tensor x, Tensor w, Tensor? bias=None, str? activation=None) -> Tensor")
        lib.impl("mm", cuda._mm_cuda, "CUDA")
        lib.impl("linear", cuda._linear_cuda, "CUDA")
        torch.library.register_fake(f"{ns}::mm", fake._mm_fake, lib=lib)
        torch.library.register_fake(f"{ns}::linear", fake._linear_fake, lib=lib)
        ops = getattr(torch.ops, ns)
        if autograd == "lean":
            mm_ag = lean_autograd(torch, ops.mm.default, grad._mm_setup, grad._mm_backward)
            linear_ag = lean_autograd(
                torch, ops.linear.default, grad._linear_setup, grad._linear_backward
            )
            lib.impl("mm", mm_ag, "Autograd", with_keyset=True)
            lib.impl("linear", linear_ag, "Autograd", with_keyset=True)
        elif autograd:
            torch.library.register_autograd(
                f"{ns}::mm", grad._mm_backward, setup_context=grad._mm_setup, lib=lib
            )
            torch.library.register_autograd(
                f"{ns}::linear", grad._linear_backward, setup_context=grad._linear_setup, lib=lib
            )
        made[ns] = (lib, ops.mm.default, ops.linear.default)
    for ns, autograd in (("pcr_bench_co", True), ("pcr_bench_co_noad", False)):

        @torch.library.custom_op(f"{ns}::mm", mutates_args=(), device_types="cuda")
        def co_mm(a: Tensor, b: Tensor) -> Tensor:
            return cuda._mm_cuda(a, b)

        @torch.library.custom_op(f"{ns}::linear", mutates_args=(), device_types="cuda")
        def co_linear(
            x: Tensor, w: Tensor, bias: Optional[Tensor] = None, activation: Optional[str] = None
        ) -> Tensor:
            return cuda._linear_cuda(x, w, bias, activation)

        co_mm.register_fake(fake._mm_fake)
        co_linear.register_fake(fake._linear_fake)
        if autograd:
            co_mm.register_autograd(grad._mm_backward, setup_context=grad._mm_setup)
            co_linear.register_autograd(grad._linear_backward, setup_context=grad._linear_setup)
        made[ns] = (None, co_mm, co_linear)
    return made


def host_section(torch, pcr, pt, args, dt):
    F = torch.nn.functional
    m, n, k = (int(v) for v in args.shape.split("x"))
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt)
    bias = torch.randn(n, device="cuda", dtype=dt)
    out = torch.empty(m, n, device="cuda", dtype=dt)
    styles = bench_registrations(torch, pt)
    ops = torch.ops.pycutlass_rt
    mm = {
        "torch.mm": lambda: torch.mm(a, b),
        "torch.mm(out=)": lambda: torch.mm(a, b, out=out),
        "pcr.gemm (out given)": lambda: pcr.gemm(a, b, None, out),
        "impl called directly": lambda: pt._cuda._mm_cuda(a, b),
        "Library.impl + autograd": lambda: ops.mm.default(a, b),
        "Library.impl + autograd (bench copy)": lambda: styles["pcr_bench_lib"][1](a, b),
        "Library.impl, no autograd": lambda: styles["pcr_bench_lib_noad"][1](a, b),
        "Library.impl + written Autograd kernel": lambda: styles["pcr_bench_lib_lean"][1](a, b),
        "custom_op + autograd": lambda: styles["pcr_bench_co"][1](a, b),
        "custom_op, no autograd": lambda: styles["pcr_bench_co_noad"][1](a, b),
        "pycutlass_rt.torch.mm": lambda: pt.mm(a, b),
        "pycutlass_rt.torch.mm(out=)": lambda: pt.mm(a, b, out=out),
    }
    results = {}
    with torch.no_grad():
        results["mm"] = host_times(mm, args.calls, args.repeats, torch.cuda.synchronize)
    print_table(f"mm {m}x{n}x{k} {args.dtype}, eager, no grad", results["mm"], "torch.mm")

    lin = {
        "F.linear": lambda: F.linear(a, w, bias),
        "F.linear + F.gelu": lambda: F.gelu(F.linear(a, w, bias)),
        "pcr.gemm fused (out given)": lambda: pcr.gemm(
            a, w.t(), None, out, bias=bias, activation="gelu"
        ),
        "impl called directly": lambda: pt._cuda._linear_cuda(a, w, bias, "gelu"),
        "Library.impl + autograd": lambda: ops.linear.default(a, w, bias, "gelu"),
        "Library.impl, no autograd": lambda: styles["pcr_bench_lib_noad"][2](a, w, bias, "gelu"),
        "Library.impl + written Autograd kernel": lambda: styles["pcr_bench_lib_lean"][2](
            a, w, bias, "gelu"
        ),
        "custom_op + autograd": lambda: styles["pcr_bench_co"][2](a, w, bias, "gelu"),
        "custom_op, no autograd": lambda: styles["pcr_bench_co_noad"][2](a, w, bias, "gelu"),
        "pycutlass_rt.torch.linear": lambda: pt.linear(a, w, bias, "gelu"),
        "F.linear, no bias": lambda: F.linear(a, w),
        "pycutlass_rt.torch.linear, no bias": lambda: pt.linear(a, w),
    }
    with torch.no_grad():
        results["linear"] = host_times(lin, args.calls, args.repeats, torch.cuda.synchronize)
    print_table(
        f"linear {m}x{n}x{k} {args.dtype} + bias + gelu, eager, no grad",
        results["linear"],
        "F.linear + F.gelu",
    )

    ref = torch.nn.Linear(k, n, device="cuda", dtype=dt)
    ours = pt.Linear.from_linear(ref)
    x = a.clone()
    modules = {"nn.Linear": lambda: ref(x), "pycutlass_rt.torch.Linear": lambda: ours(x)}
    with torch.no_grad():
        results["module"] = host_times(modules, args.calls, args.repeats, torch.cuda.synchronize)
    print_table("module forward, no grad", results["module"], "nn.Linear")
    # parameters that require grad: forward only (autograd records the graph each call)
    results["module_grad"] = host_times(modules, args.calls, args.repeats, torch.cuda.synchronize)
    print_table("module forward, parameters require grad", results["module_grad"], "nn.Linear")
    return results


def compiled_section(torch, pt, args, dt):
    F = torch.nn.functional
    m, n, k = (int(v) for v in args.shape.split("x"))
    x = torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt)
    bias = torch.randn(n, device="cuda", dtype=dt)
    b = w.t().contiguous()
    results = {}
    for mode in ("default", "reduce-overhead"):
        torch._dynamo.reset()
        c = {
            "torch.mm": torch.compile(lambda a, b: torch.mm(a, b), mode=mode, fullgraph=True),
            "pycutlass_rt::mm": torch.compile(lambda a, b: pt.mm(a, b), mode=mode, fullgraph=True),
            "F.linear + F.gelu": torch.compile(
                lambda x, w, c: F.gelu(F.linear(x, w, c)), mode=mode, fullgraph=True
            ),
            "pycutlass_rt::linear gelu": torch.compile(
                lambda x, w, c: pt.linear(x, w, c, "gelu"), mode=mode, fullgraph=True
            ),
        }
        calls = {
            "torch.mm": lambda c=c: c["torch.mm"](x, b),
            "pycutlass_rt::mm": lambda c=c: c["pycutlass_rt::mm"](x, b),
            "F.linear + F.gelu": lambda c=c: c["F.linear + F.gelu"](x, w, bias),
            "pycutlass_rt::linear gelu": lambda c=c: c["pycutlass_rt::linear gelu"](x, w, bias),
        }
        with torch.no_grad():
            results[mode] = host_times(calls, args.calls, args.repeats, torch.cuda.synchronize)
        print_table(
            f"torch.compile(mode={mode!r}), {args.shape} {args.dtype}, no grad",
            results[mode],
            "torch.mm",
        )
    return results


def mlp_section(torch, pt, args, dt):
    F = torch.nn.functional

    class Block(torch.nn.Module):
        def __init__(self, fused):
            super().__init__()
            Lin = pt.Linear if fused else torch.nn.Linear
            act = {"activation": "silu"} if fused else {}
            self.gate_proj = Lin(args.hidden, args.inter, bias=False, **act)
            self.up_proj = Lin(args.hidden, args.inter, bias=False)
            self.down_proj = Lin(args.inter, args.hidden, bias=False)
            self.fused = fused

        def forward(self, x):
            gate = self.gate_proj(x) if self.fused else F.silu(self.gate_proj(x))
            return self.down_proj(gate * self.up_proj(x))

    ref = Block(False).to("cuda", dt)
    ours = Block(True).to("cuda", dt)
    ours.load_state_dict(ref.state_dict())
    results = {}
    for tokens in (int(t) for t in args.tokens.split(",")):
        x = torch.randn(tokens, args.hidden, device="cuda", dtype=dt)
        row = {}
        for name, module in (("nn.Linear", ref), ("pycutlass_rt.torch.Linear", ours)):
            torch._dynamo.reset()
            compiled = torch.compile(module, mode="reduce-overhead", fullgraph=True)
            for label, fn in (("eager", module), ("reduce-overhead", compiled)):
                with torch.no_grad():
                    for _ in range(5):
                        fn(x)
                    samples = []
                    for _ in range(5):
                        start = torch.cuda.Event(enable_timing=True)
                        end = torch.cuda.Event(enable_timing=True)
                        start.record()
                        for _ in range(args.iters):
                            fn(x)
                        end.record()
                        end.synchronize()
                        samples.append(start.elapsed_time(end) / args.iters * 1e3)
                row[f"{name}, {label}"] = statistics.median(samples)
        results[tokens] = row
        base = row["nn.Linear, reduce-overhead"]
        print(
            f"\nMLP block, {tokens} tokens, hidden {args.hidden}, inter {args.inter}, "
            f"{args.dtype}: device us per call"
        )
        for name, us in row.items():
            print(f"  {name:38}  {us:9.2f}  {base / us:5.2f}x (nn.Linear reduce-overhead / this)")
    return results


def main(argv=None):
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"torch {torch.__version__} sees no CUDA device: nothing to measure", file=sys.stderr)
        return 1
    import pycutlass_rt as pcr
    import pycutlass_rt.torch as pt

    dt = getattr(torch, DTYPES[args.dtype])
    sections = args.only or ["host", "compiled", "mlp"]
    print(
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}, pycutlass_rt "
        f"{pcr.__version__} ({pcr.info()['library']})"
    )
    results = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    if "host" in sections:
        results["host"] = host_section(torch, pcr, pt, args, dt)
    if "compiled" in sections:
        results["compiled"] = compiled_section(torch, pt, args, dt)
    if "mlp" in sections:
        results["mlp"] = mlp_section(torch, pt, args, dt)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    # Python put this file's folder first on the path: put the checkout there instead (as
    # benchmarks/run.py does), so that its modules do not shadow top-level names and this
    # checkout's pycutlass_rt is the one measured.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
