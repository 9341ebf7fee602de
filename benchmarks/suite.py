"""The whole run: machine and versions, every case in order, results written as it goes."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from dataclasses import asdict

from . import device, peers, report
from .measure import Bench
from .progress import Progress
from .shapes import GROUPS

SCHEMA = 1
#: L2 of an H200, used when the framework does not report it
DEFAULT_L2 = 60 << 20


def _dist_version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001 - not installed
        return None


def versions(pcr, info, fw, cutlass) -> dict:
    import numpy

    out = {
        "pycutlass_rt": pcr.__version__,
        "library": info.get("library"),
        "abi": info.get("abi"),
        "build": info.get("build"),
        "cuda_runtime_static": info.get("runtime_version"),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "framework": fw.name,
        **fw.versions(),
        "nvidia-cutlass": _dist_version("nvidia-cutlass"),
        "cuda-bindings": _dist_version("cuda-bindings"),
        "cuda-python": _dist_version("cuda-python"),
    }
    if "cupy" not in out:
        out["cupy"] = (
            _dist_version("cupy-cuda13x") or _dist_version("cupy-cuda12x") or _dist_version("cupy")
        )
    if cutlass is not None:
        out["cutlass_cppgen"] = cutlass.version
    return out


def machine(info, fw) -> dict:
    dev = fw.device_info()
    static = device.nvidia_smi("name,driver_version,clocks.max.sm,clocks.max.mem,power.limit")
    return {
        "gpu": dev["name"],
        "sm_count": dev["sm_count"],
        "cc": dev["cc"],
        "l2_bytes": dev.get("l2_bytes"),
        "memory_bytes": dev.get("memory_bytes"),
        "driver": info.get("driver_version"),
        "host": platform.node(),
        "nvidia_smi": static,
        "smi_before": device.nvidia_smi(),
    }


def default_out(gpu: str, today: datetime.date | None = None) -> str:
    """``bench-results/<gpu>-<date>``, the GPU name lower-cased with dashes."""
    slug = "".join(ch if ch.isalnum() else "-" for ch in gpu.lower()).strip("-")
    while "--" in slug:
        slug = slug.replace("--", "-")
    return os.path.join("bench-results", f"{slug or 'gpu'}-{(today or datetime.date.today())}")


def run(
    pcr, info, fw, case_list, *, settings, out_dir=None, use_cutlass=True, command="", stream=None
) -> tuple:
    """Runs ``case_list``; returns (result dict, path of the JSON written)."""
    cutlass = peers.CutlassPython() if use_cutlass else None
    peer_list = [peers.blas_peer(fw)] + ([cutlass] if cutlass else [])
    if fw.name == "torch" and any(c.experts and not c.skip for c in case_list):
        peer_list.append(peers.TorchGroupedMM())
    mach = machine(info, fw)
    out_dir = out_dir or default_out(mach["gpu"])
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "bench.json")
    result = {
        "schema": SCHEMA,
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": command,
        "settings": asdict(settings),
        "machine": mach,
        "versions": versions(pcr, info, fw, cutlass),
        "plan": "available" if hasattr(pcr, "Gemm") else "not available",
        "peers": {},
        "records": [],
    }
    if not use_cutlass:
        result["peers"]["cutlass"] = {"available": False, "reason": "--no-cutlass"}
    bench = Bench(
        fw,
        pcr,
        peer_list,
        settings,
        mach.get("l2_bytes") or DEFAULT_L2,
        getattr(fw, "free_bytes", None),
    )
    progress = Progress(len(case_list), stream=stream)
    interrupted = False
    try:
        for case in case_list:
            progress.show(f"{case.group} {GROUPS[case.group].title} {case.dtype} {case.label}")
            result["records"].append(bench.run(case))
            _save(result, peer_list, path)  # a run cut short (timeout, kill) keeps its cases
            progress.step()
    except KeyboardInterrupt:
        interrupted = True
        result["interrupted"] = True
    finally:
        progress.close()
        result["machine"]["smi_after"] = device.nvidia_smi()
        result["summary"] = report.summarize(result["records"])
        _save(result, peer_list, path)  # the numbers first: a plot must not cost them
        result["plots"] = report.plot_groups(result, out_dir)
        _save(result, peer_list, path)
        if cutlass:
            cutlass.close()
    if interrupted:
        raise KeyboardInterrupt
    return result, path


def _save(result, peer_list, path):
    for p in peer_list:
        result["peers"][p.name] = p.info()
    report.write_json(path, result)


def print_summary(result, path, file=None):
    file = file or sys.stdout
    m = result["machine"]
    print(
        f"pycutlass_rt {result['versions']['pycutlass_rt']} on {m['gpu']} "
        f"({m['sm_count']} SMs), {result['versions']['framework']} "
        f"{result['versions'].get(result['versions']['framework'])}",
        file=file,
    )
    if result.get("settings", {}).get("hot"):
        print("operands: hot (one set reused by every call)", file=file)
    print(report.format_table(result["summary"], result["records"]), file=file)
    for name, p in result["peers"].items():
        if not p.get("available", True):
            print(f"peer {name}: not run ({p.get('reason')})", file=file)
        elif p.get("compile_s"):
            print(
                f"peer {name}: compile (first call) "
                + ", ".join(f"{s:.1f} s" for s in p["compile_s"].values()),
                file=file,
            )
    print(f"plan: {result['plan']}", file=file)
    plots = result.get("plots", {})
    if "error" in plots:
        print(plots["error"], file=file)
    print(f"results: {path}", file=file)
