"""Arch families and arch tokens: which GPUs a build targets, and the nvcc flags for them.

A family is one kernel template compiled for the family's SASS targets. The build's arch
tokens (``PYCUTLASS_RT_ARCHS``, see the package's docstring) are mapped onto families
(``plan``), leaving out what the CUDA toolkit cannot build and SASS another target already
covers, and each family's kernels get the gencode flags of its targets (``gencode_flags``).
Kept apart from the kernels: it needs none of them, and the kernel record reads which
families are CUTLASS 3.x ones from here.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys


@dataclasses.dataclass(frozen=True)
class Family:
    """An arch family: one kernel template, compiled for the family's targets."""

    name: str
    header: str
    #: arch tokens whose SASS this family's kernels are compiled to
    tokens: tuple[str, ...]
    #: virtual arch the PTX / front end is built for
    virtual: str
    #: whether PTX is embedded for GPUs newer than every SASS target
    ptx: bool
    #: oldest CUDA toolkit that can build it
    min_cuda: tuple[int, int]
    #: newest CUDA toolkit that still can (None: no limit)
    max_cuda: tuple[int, int] | None = None
    #: (token, virtual arch): SASS of another GPU built from this front end, so that the
    #: family's templates run in tests there (never chosen by selection on that GPU)
    test: tuple[tuple[str, str], ...] = ()

    def virtual_for(self, token: str) -> str:
        """The front end (virtual arch) that builds ``token``'s SASS."""
        return (
            dict(self.test).get(token, self.virtual) if token not in self.tokens else self.virtual
        )


FAMILIES = {
    # Volta (V100): CUDA 13 dropped sm_70, so only a CUDA 12.x (or older) toolkit builds
    # it. Its sm_90 SASS (from the compute_75 front end, which CUDA 13 still has; Hopper
    # emulates m8n8k4) lets the H200 check the template's logic.
    "sm70": Family(
        "sm70", "mma_gemm.cuh", ("70",), "70", False, (11, 0), (12, 9), test=(("90", "75"),)
    ),
    # Turing; its SASS for sm_90 lets Hopper run these templates in tests. The sm80
    # family's PTX, not this one's, serves GPUs newer than every SASS target.
    "sm75": Family("sm75", "mma_gemm.cuh", ("75",), "75", False, (11, 0), test=(("90", "75"),)),
    "sm80": Family("sm80", "mma_gemm.cuh", ("80", "86", "89", "90"), "80", True, (11, 0)),
    # Ada's fp8 mma.sync; Hopper has the instruction too, so its sm_90 SASS runs in tests
    "sm89": Family("sm89", "mma_gemm.cuh", ("89",), "89", False, (12, 4), test=(("90", "89"),)),
    "sm90": Family("sm90", "tma_gemm.cuh", ("90a",), "90a", False, (12, 3)),
    "sm100": Family("sm100", "tma_gemm.cuh", ("100a",), "100a", False, (12, 8)),
}
TMA_FAMILIES = ("sm90", "sm100")  # CUTLASS 3.x families: tile, cluster and schedule
ALL_TOKENS = tuple(
    dict.fromkeys(t for f in FAMILIES.values() for t in f.tokens + tuple(t for t, _ in f.test))
)
DEFAULT_ARCHS = "80;86;89;90;90a"


def auto_tokens() -> list[str]:
    """The archs of an unset ``PYCUTLASS_RT_ARCHS``: the GPUs nvidia-smi lists (a build on
    a machine with a GPU is for that GPU, and several times faster), else ``default``."""
    try:
        tokens = native_tokens()
    except SystemExit:
        return parse_archs("default")
    print(
        f"pycutlass_rt: archs {';'.join(tokens)}, this machine's GPUs "
        "(PYCUTLASS_RT_ARCHS=default builds the portable set, all every arch)",
        file=sys.stderr,
    )
    return tokens


def native_tokens() -> list[str]:
    """Arch tokens for the GPUs of this machine (nvidia-smi), e.g. ['90', '90a']."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise SystemExit(
            f"PYCUTLASS_RT_ARCHS=native: cannot query the GPUs ({e}); "
            "name the archs, e.g. PYCUTLASS_RT_ARCHS='80;90a'"
        ) from None
    tokens: list[str] = []
    for line in out.split():
        cc = line.strip().replace(".", "")
        if cc:
            tokens.append(cc)
            if cc in ("90", "100"):  # arch-specific features: wgmma, tcgen05
                tokens.append(cc + "a")
    if not tokens:
        raise SystemExit("PYCUTLASS_RT_ARCHS=native: nvidia-smi lists no GPU")
    return list(dict.fromkeys(tokens))


def parse_archs(spec: str) -> list[str]:
    """Arch tokens of a ``PYCUTLASS_RT_ARCHS`` value (see the module's docstring).

    >>> parse_archs("80;sm_90a"), parse_archs("default")[:2]
    (['80', '90a'], ['80', '86'])
    """
    spec = (spec or "auto").strip()
    if spec == "auto":  # unset: this machine's GPUs, else the portable set
        return auto_tokens()
    if spec == "default":
        spec = DEFAULT_ARCHS
    if spec == "all":
        return list(ALL_TOKENS)
    if spec == "native":
        return native_tokens()
    tokens = [
        t.strip().replace("sm_", "").replace("sm", "")
        for t in re.split(r"[;, ]", spec)
        if t.strip()
    ]
    unknown = [t for t in tokens if t not in ALL_TOKENS and not t.isdigit()]
    if unknown:
        raise SystemExit(
            f"PYCUTLASS_RT_ARCHS: unknown arch token(s) {unknown}; "
            f"known: {', '.join(ALL_TOKENS)}, native, all"
        )
    return tokens


def plan(archs: list[str], toolkit_codes: set[str] | None, cuda_version: tuple[int, int] | None):
    """Maps requested arch tokens onto families.

    Returns (family -> SASS tokens to build, notes about skipped tokens).
    """
    notes = []
    per_family: dict[str, list[str]] = {}
    for token in archs:
        fams = [f for f in FAMILIES.values() if token in f.tokens or token in dict(f.test)]
        if not fams:
            notes.append(f"sm_{token}: no kernel family in this catalogue targets it; skipped")
            continue
        for fam in fams:
            own = token in fam.tokens  # else a test target, built from another front end
            if own and cuda_version and fam.max_cuda and cuda_version > fam.max_cuda:
                notes.append(
                    f"sm_{token}: the {fam.name} family is built by CUDA "
                    f"{fam.max_cuda[0]}.x and older only; CUDA "
                    f"{cuda_version[0]}.{cuda_version[1]} dropped sm_{token} (its nvcc "
                    f"cannot generate that code), so it is skipped: build with a CUDA "
                    f"{fam.max_cuda[0]}.x toolkit to include it"
                )
                continue
            if cuda_version and cuda_version < fam.min_cuda:
                notes.append(
                    f"sm_{token}: the {fam.name} family needs CUDA >= "
                    f"{fam.min_cuda[0]}.{fam.min_cuda[1]}; skipped"
                )
                continue
            # nvcc lists base archs only: sm_90 stands for sm_90a too
            if toolkit_codes is not None and f"sm_{token.rstrip('af')}" not in toolkit_codes:
                notes.append(f"sm_{token}: this nvcc cannot generate code for it; skipped")
                continue
            per_family.setdefault(fam.name, []).append(token)
    for name, tokens in per_family.items():
        covered = [t for t in tokens if _sass_covers(tokens, t)]
        if covered:
            per_family[name] = [t for t in tokens if t not in covered]
            notes.append(
                f"{', '.join('sm_' + t for t in covered)}: the {name} family's SASS for an "
                "older GPU of the same major version runs there; not compiled again"
            )
    return per_family, notes


def _sass_covers(tokens: list[str], token: str) -> bool:
    """Whether another of ``tokens`` gives SASS that runs on ``token``'s GPUs: an older
    plain (not arch-specific) target of the same major version (sm_80 SASS runs on 8.6
    and 8.9; sm_90a's does not run elsewhere).

    >>> _sass_covers(["80", "86", "90"], "86"), _sass_covers(["80", "90"], "90")
    (True, False)
    """
    if not token.isdigit():
        return False
    return any(t.isdigit() and t[:-1] == token[:-1] and int(t) < int(token) for t in tokens)


def gencode_flags(family: Family, tokens: list[str]) -> list[str]:
    """One front-end pass per virtual arch (the family's, and a test target's where it
    differs), SASS for each token, plus the family's PTX."""
    by_front_end: dict[str, list[str]] = {}
    for t in tokens:
        by_front_end.setdefault(family.virtual_for(t), []).append(f"sm_{t}")
    if family.ptx and family.virtual in by_front_end:
        by_front_end[family.virtual].append(f"compute_{family.virtual}")
    return [
        f"-gencode=arch=compute_{v},code=[{','.join(codes)}]" for v, codes in by_front_end.items()
    ]


def runtime_gencode(per_family: dict[str, list[str]]) -> list[str]:
    """The runtime's own small kernels: SASS for every built arch plus PTX of the oldest."""
    bases = sorted({t.rstrip("af") for toks in per_family.values() for t in toks}, key=int)
    if not bases:
        bases = ["80"]
    codes = [f"sm_{b}" for b in bases] + [f"compute_{bases[0]}"]
    return [f"-gencode=arch=compute_{bases[0]},code=[{','.join(codes)}]"]


def toolkit(nvcc: str | None):
    """(set of 'sm_XX' codes nvcc can build, (major, minor)) or (None, None)."""
    if not nvcc:
        return None, None
    try:
        codes = set(
            subprocess.run(
                [nvcc, "--list-gpu-code"], capture_output=True, text=True, check=True
            ).stdout.split()
        )
        ver = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
        m = re.search(r"release (\d+)\.(\d+)", ver)
        return codes, (int(m.group(1)), int(m.group(2))) if m else None
    except (OSError, subprocess.SubprocessError):
        return None, None
