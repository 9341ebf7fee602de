"""Translation units and compile cost: how many kernels compile together, and how long.

Kernels compile several to a translation unit (they share the headers' parsing and most
instantiations) and a few units at once (their memory); ``units`` groups them, and the
cost model sizes the units (``unit_size``, ``unit_jobs``) and prints an estimate before
the build, so that nobody waits blind.
"""

from __future__ import annotations

from .archs import FAMILIES, TMA_FAMILIES, gencode_flags
from .kernel import Kernel
from .sources import header_of

#: compile cost, in seconds of one core with CUDA 13.0: a kernel's translation unit (front
#: end and host code) plus each SASS target's device compile, fitted to measured builds
#: and nvcc --time of single kernels (docs/install.md has the build minutes), so that the
#: build's estimate and the units' balance follow what the compiler spends.
COMPILE_SECONDS = {"unit": 8.0, "target": 4.0, "arch_specific": 40.0}

#: Kernels compiled as one translation unit share the parsing of their headers and most
#: template instantiations, which is where their time goes (nvcc --time: the front ends,
#: not SASS generation). On a 2-core machine, two compiles at once, CUDA 13.0: eight sm90a
#: bf16 kernels in one unit 97 s and 5.9 GB at peak, against 334 s one by one (each 37-46 s,
#: 3.4 GB); four 67 s, 4.9 GB; eight sm80 ones 35-38 s against 117 s. Their SASS is the
#: same either way (cuobjdump). So a unit's kernels after its first cost FOLLOWER_SHARE of
#: their own time, a unit holds at most MAX_UNIT (its memory), and ``auto`` sizing leaves
#: UNITS_PER_CORE units per core, so that many cores still share the work evenly.
FOLLOWER_SHARE = 0.22
MAX_UNIT = 8
UNITS_PER_CORE = 3
#: an sm90a unit's peak memory in GB: its first kernel, and each further one
UNIT_PEAK_GB = (3.4, 0.35)


def kernel_seconds(k: Kernel, per_family: dict[str, list[str]]) -> float:
    """Core-seconds that compiling ``k`` alone for ``per_family``'s SASS targets takes."""
    c = COMPILE_SECONDS
    targets = len(per_family.get(k.family, []))
    if k.family in TMA_FAMILIES:
        return c["arch_specific"] * max(targets, 1)
    return c["unit"] + c["target"] * targets


def compile_seconds(
    kernels: list[Kernel], per_family: dict[str, list[str]], size: int = 1
) -> float:
    """Core-seconds that compiling ``kernels`` for ``per_family``'s SASS targets takes,
    ``size`` kernels per translation unit."""
    seconds = 0.0
    for _, members, _ in units(kernels, per_family, size):
        costs = sorted((kernel_seconds(k, per_family) for k in members), reverse=True)
        seconds += costs[0] + FOLLOWER_SHARE * sum(costs[1:])
    return seconds


def unit_size(spec: str | None, kernels: int, cores: int) -> int:
    """Kernels per translation unit: ``spec`` (``PYCUTLASS_RT_UNIT_SIZE``) a number, or
    ``auto`` (unset): as many as leave UNITS_PER_CORE units per core, 1 to MAX_UNIT.

    >>> [unit_size("auto", 234, 2), unit_size("auto", 234, 16), unit_size(None, 5, 2)]
    [8, 4, 1]
    >>> unit_size("1", 234, 2)
    1
    """
    spec = (spec or "auto").strip()
    if spec == "auto":
        return max(1, min(MAX_UNIT, kernels // (UNITS_PER_CORE * max(cores, 1))))
    if not spec.isdigit() or int(spec) < 1:
        raise SystemExit(f"PYCUTLASS_RT_UNIT_SIZE={spec}: expected auto or a whole number >= 1")
    return int(spec)


def unit_jobs(size: int, cores: int, memory_gb: float) -> int:
    """How many units compile at once: one per core, fewer where their peak memory would
    pass three quarters of ``memory_gb``.

    >>> [unit_jobs(8, 2, 23), unit_jobs(8, 16, 64), unit_jobs(1, 16, 256)]
    [2, 8, 16]
    """
    first, further = UNIT_PEAK_GB
    fits = int(0.75 * memory_gb // (first + further * (size - 1)))
    return max(1, min(cores, fits))


def units(
    kernels: list[Kernel], per_family: dict[str, list[str]], size: int
) -> list[tuple[str, list[Kernel], list[str]]]:
    """The translation units that compile ``kernels``: (name, kernels, gencode flags).

    A unit's kernels share a header and gencode flags, and are neighbours in name order
    (same family, dtypes and layout first), so that they share the most instantiations. A
    one-kernel unit is named after its kernel.

    >>> from catalog import catalogue
    >>> ks = [k for k in catalogue() if k.name.startswith("sm90_bf16_bf16_f32_bf16_tn_128")]
    >>> [(n, len(m)) for n, m, _ in units(ks[:5], {"sm90": ["90a"]}, 2)][:2]
    [('sm90_tma_gemm_000', 2), ('sm90_tma_gemm_001', 2)]
    >>> units(ks[:1], {"sm90": ["90a"]}, 2)[0][0] == ks[0].name
    True
    """
    groups: dict[tuple, list[Kernel]] = {}
    for k in sorted(kernels, key=lambda k: k.name):
        flags = gencode_flags(FAMILIES[k.family], per_family.get(k.family, []))
        groups.setdefault((k.family, header_of(k), tuple(flags)), []).append(k)
    out = []
    for (family, header, flags), members in groups.items():
        stem = f"{family}_{header.split('.')[0]}"
        for i in range(0, len(members), size):
            chunk = members[i : i + size]
            name = chunk[0].name if len(chunk) == 1 else f"{stem}_{i // size:03d}"
            out.append((name, chunk, list(flags)))
    return out


def estimate_minutes(
    kernels: list[Kernel], per_family: dict[str, list[str]], cores: int, size: int = 1
):
    """(core-minutes, wall minutes on ``cores``) that compiling ``kernels`` takes, ``size``
    kernels per translation unit.

    An sm90a/sm100a (CUTLASS 3.x) kernel costs ``arch_specific`` seconds; a CUTLASS 2.x
    kernel a ``unit`` plus a ``target`` per SASS target of its family; in a unit, each
    kernel after the first FOLLOWER_SHARE of that. Rough (+-20%): it is printed before the
    build so that nobody waits blind.

    >>> from catalog import catalogue
    >>> ks = [k for k in catalogue() if k.name == "sm80_f16_f16_f32_f16_tn_128x128x32_w2x2_s4_a8"]
    >>> estimate_minutes(ks, {"sm80": ["80", "86"]}, cores=1)
    (0.27, 0.27)
    """
    core_minutes = round(compile_seconds(kernels, per_family, size) / 60, 2)
    return core_minutes, round(core_minutes / max(cores, 1), 2)
