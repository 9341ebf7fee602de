"""The built library holds SASS for every requested arch, with the expected instructions.

Uses cuobjdump and nvdisasm (CUDA toolkit, or the nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm wheels); skipped where neither is installed. This is how archs we
cannot run here are still checked.
"""

import collections
import functools
import glob
import os
import re
import shutil
import subprocess
import sysconfig

import pytest

import pycutlass_rt as pcr


@functools.cache
def tool_dir():
    if shutil.which("cuobjdump") and shutil.which("nvdisasm"):
        return os.path.dirname(shutil.which("cuobjdump"))
    for d in glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "*", "bin")):
        if os.path.exists(os.path.join(d, "cuobjdump")) and os.path.exists(
            os.path.join(d, "nvdisasm")
        ):
            return d
    return None


def cuobjdump(*args):
    d = tool_dir()
    if d is None:
        pytest.skip(
            "cuobjdump/nvdisasm not installed (pip install nvidia-cuda-cuobjdump "
            "nvidia-cuda-nvdisasm)"
        )
    env = dict(os.environ, PATH=d + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run(
        [os.path.join(d, "cuobjdump"), *args, pcr._lib.load().path],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout


#: the mangled names of kernels' entry functions: CUTLASS's, and the library's own direct
#: depthwise kernels (pcr::depthwise::depthwise_fprop)
ENTRIES = r"(?:_ZN7cutlass|_ZN3pcr9depthwise)"


def test_sass_for_every_requested_arch():
    # every kernel's CUTLASS entry function, in the SASS of each arch its family was built
    # for (counted by function: several kernels may share a translation unit and its cubin)
    entries: collections.Counter = collections.Counter()
    arch = None
    for line in cuobjdump("-res-usage").splitlines():
        if m := re.match(r"arch = (sm_\w+)", line):
            arch = m[1]
        elif re.match(rf"\s*Function {ENTRIES}\w*:", line):
            entries[arch] += 1
    families = pcr.info()["build"]["catalog"]["families"]
    per_family = collections.Counter(f"sm{k.family}" for k in pcr.kernels())
    for token in {t for tokens in families.values() for t in tokens}:
        want = sum(per_family[fam] for fam, tokens in families.items() if token in tokens)
        assert entries[f"sm_{token}"] >= want, (token, want, entries)
    if "sm80" in families:  # and PTX for GPUs newer than every SASS target
        ptx = cuobjdump("-ptx", "-arch", "sm_80")
        assert len(re.findall(rf"\.entry {ENTRIES}", ptx)) >= per_family["sm80"]


#: (family, input dtype) -> the MMA instruction its kernels must contain
MMA = {
    **{("sm90", a): "HGMMA" for a in ("float16", "bfloat16", "tfloat32")},  # wgmma
    **{("sm90", a): "QGMMA" for a in ("float8_e4m3fn", "float8_e5m2")},
    ("sm90", "int8"): "IGMMA",
    **{("sm100", a): "UTCHMMA" for a in ("float16", "bfloat16")},  # tcgen05.mma
    **{("sm100", a): "UTCQMMA" for a in ("float8_e4m3fn", "float8_e5m2")},
    **{("sm80", a): "HMMA.16816" for a in ("float16", "bfloat16")},  # mma.sync
    **{("sm80", a): "HMMA.1688.F32.TF32" for a in ("tfloat32", "float32")},
    ("sm80", "float64"): "DMMA",  # DMMA.884 (sm_8x), DMMA.8x8x4 (sm_90)
    ("sm80", "int8"): "IMMA.16832",
    **{("sm89", a): "QMMA.16832" for a in ("float8_e4m3fn", "float8_e5m2")},
    ("sm75", "float16"): "HMMA.1688",  # Turing
    ("sm75", "int8"): "IMMA.8816",
    ("sm70", "float16"): "HMMA.884",  # Volta (CUDA 12.x)
    **{(f, "float32"): "FFMA" for f in ("sm70", "sm75")},  # SIMT
    **{(f, "float64"): "DFMA" for f in ("sm70", "sm75")},
}


@pytest.mark.parametrize(
    "family,arch",
    [
        ("sm90", "sm_90a"),
        ("sm100", "sm_100a"),
        ("sm80", "sm_80"),
        ("sm75", "sm_75"),
        ("sm70", "sm_70"),
        ("sm80", "sm_86"),
        ("sm80", "sm_89"),
        ("sm80", "sm_90"),
        ("sm89", "sm_89"),
    ],
)
def test_expected_instructions(family, arch):
    tokens = pcr.info()["build"]["catalog"]["families"].get(family, [])
    if arch[3:] not in tokens:
        pytest.skip(f"this build has no {arch} code for {family}")
    mine = [k for k in pcr.kernels() if f"sm{k.family}" == family]
    direct = ("depthwise", "direct")
    must = sorted({MMA[family, k.dtype_a] for k in mine if k.schedule not in direct})
    if any(k.schedule in direct for k in mine):  # CUDA-core FMAs
        must.append("FFMA")
    if any(k.schedule == "depthwise" for k in mine):  # on 16-byte loads
        must.append("LDG.E.128")
    if family in ("sm90", "sm100"):
        must.append("UTMALDG")  # TMA
    if family == "sm100" and any(k.schedule == "2sm" for k in pcr.kernels()):
        must = must + ["UTCHMMA.2CTA"]  # the MMA shared by a CTA pair
    if family == "sm80" and any(k.schedule == "multistage" for k in pcr.kernels()):
        must = must + ["LDGSTS"]  # cp.async
    sass = cuobjdump("-sass", "-arch", arch)
    for instr in must:
        assert instr in sass, f"{instr} missing from {arch} SASS"


def test_sm90a_kernels_wait_for_their_predecessor():
    """Launched as programmatic dependents, every non-grouped sm90a GEMM must hold the grid
    dependency wait (griddepcontrol.wait: ACQBULK); grouped ones launch plainly."""
    want = sum(1 for k in pcr.kernels() if k.family == 90 and not k.grouped)
    if not want or "90a" not in pcr.info()["build"]["catalog"]["families"].get("sm90", []):
        pytest.skip("this build has no sm90a GEMM")
    functions = cuobjdump("-sass", "-arch", "sm_90a").split("Function : ")[1:]
    waiting = [f for f in functions if re.search(r"\b[HQI]GMMA\b", f) and "ACQBULK" in f]
    assert len(waiting) >= want, f"{len(waiting)} of {want} sm90a GEMMs wait for their predecessor"
