"""The hand-made shape grids, as data: the one copy of the lists that ``sweep.py --grid``
times and the benchmark measures (benchmarks/shapes.py: groups A-D and H take them from
here; benchmarks/README.md describes the groups).

Tool folders depend one way: ``benchmarks/`` imports from ``heuristics/`` (these grids,
the shape corpus, profiling.py), never the reverse.
"""

from __future__ import annotations

#: (N, K) pairs of groups B and C: the projections of 8B- and 70B-class transformer layers.
NK_PAIRS = [(4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192), (28672, 8192), (8192, 28672)]
DECODE_M = (1, 8, 16, 32, 64, 128, 256)
PREFILL_M = (512, 2048, 8192)
SQUARE_SIZES = (1024, 2048, 4096, 8192)

SQUARE = [(s, s, s) for s in SQUARE_SIZES]
DECODE = [(m, n, k) for m in DECODE_M for n, k in NK_PAIRS]
PREFILL = [(m, n, k) for m in PREFILL_M for n, k in NK_PAIRS]
#: 127x1000x4097 (no 16-byte alignment anywhere), 8191^3, N = 1, K in {16, 64}, long K,
#: and odd vocabularies' projections (Whisper's 51866 at decode, GPT-2's 50257 at prefill):
#: an odd N stages D but must not copy B
AWKWARD = [
    (127, 1000, 4097),
    (8191, 8191, 8191),
    (4096, 1, 4096),
    (4096, 4096, 16),
    (4096, 4096, 64),
    (256, 256, 65536),
    (4, 51866, 1280),
    (300, 50257, 768),
]
