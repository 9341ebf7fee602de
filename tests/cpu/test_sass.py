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


@functools.lru_cache(maxsize=None)
def tool_dir():
    if shutil.which("cuobjdump") and shutil.which("nvdisasm"):
        return os.path.dirname(shutil.which("cuobjdump"))
    for d in glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "*", "bin")):
        if os.path.exists(os.path.join(d, "cuobjdump")) and os.path.exists(os.path.join(d, "nvdisasm")):
            return d
    return None


def cuobjdump(*args):
    d = tool_dir()
    if d is None:
        pytest.skip("cuobjdump/nvdisasm not installed (pip install nvidia-cuda-cuobjdump "
                    "nvidia-cuda-nvdisasm)")
    env = dict(os.environ, PATH=d + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([os.path.join(d, "cuobjdump"), *args, pcr._lib.load().path],
                          capture_output=True, text=True, env=env, check=True).stdout


def test_sass_for_every_requested_arch():
    elves = collections.Counter(re.findall(r"\.(sm_\d+a?)\.cubin", cuobjdump("--list-elf")))
    families = pcr.info()["build"]["catalog"]["families"]
    per_family = collections.Counter(f"sm{k.family}" for k in pcr.kernels())
    for fam, tokens in families.items():
        for token in tokens:
            assert elves[f"sm_{token}"] >= per_family[fam], (fam, token, elves)
    if "sm80" in families:  # and PTX for GPUs newer than every SASS target
        ptx = re.findall(r"\.(sm_\d+a?)\.ptx", cuobjdump("--list-ptx"))
        assert ptx.count("sm_80") >= per_family["sm80"]


@pytest.mark.parametrize("family,arch,must", [
    ("sm90", "sm_90a", ["HGMMA", "UTMALDG"]),      # wgmma and TMA
    ("sm100", "sm_100a", ["UTCHMMA", "UTMALDG"]),  # tcgen05.mma and TMA
    ("sm80", "sm_80", ["HMMA.16816"]),             # mma.sync
    ("sm75", "sm_75", ["HMMA.1688"]),              # Turing mma.sync
    ("sm70", "sm_70", ["HMMA.884"]),               # Volta mma.sync (CUDA 12.x builds)
    ("sm80", "sm_86", ["HMMA.16816"]),
    ("sm80", "sm_89", ["HMMA.16816"]),
    ("sm80", "sm_90", ["HMMA.16816"]),
])
def test_expected_instructions(family, arch, must):
    tokens = pcr.info()["build"]["catalog"]["families"].get(family, [])
    if arch[3:] not in tokens:
        pytest.skip(f"this build has no {arch} code for {family}")
    if family == "sm100" and any(k.schedule == "2sm" for k in pcr.kernels()):
        must = must + ["UTCHMMA.2CTA"]  # the MMA shared by a CTA pair
    if family == "sm80" and any(k.schedule == "multistage" for k in pcr.kernels()):
        must = must + ["LDGSTS"]  # cp.async
    sass = cuobjdump("-sass", "-arch", arch)
    for instr in must:
        assert instr in sass, f"{instr} missing from {arch} SASS"
