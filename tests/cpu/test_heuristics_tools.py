"""The sweep -> fit -> table pipeline of heuristics/, on synthetic sweep data."""
import csv
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "heuristics"))

import fit  # noqa: E402
import sweep  # noqa: E402

from pycutlass_rt import _select  # noqa: E402
from pycutlass_rt._kernels import KernelInfo  # noqa: E402

SMALL = "sm90_bf16_bf16_f32_bf16_tn_64x128x64_c1x1_pingpong_a8"
BIG = "sm90_bf16_bf16_f32_bf16_tn_128x256x64_c2x1_coop_a8"


def write_sweep(path):
    """Small tiles win at M <= 64, big tiles win above."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, sweep.COLUMNS)
        w.writeheader()
        for m in (1, 16, 64, 512, 4096):
            for name in (SMALL, BIG):
                small_wins = m <= 64
                us = 10.0 if (name == SMALL) == small_wins else 13.0
                w.writerow({"gpu": "H200", "sm_count": 132, "library": "x", "dtype": "bfloat16",
                            "dtype_d": "bfloat16", "layout": "tn", "m": m, "n": 4096, "k": 4096,
                            "kernel": name, "median_us": us, "tflops": 1.0})


def test_config_of():
    assert fit.config_of(BIG) == "sm90_*_128x256x64_c2x1_coop_a8"
    assert fit.config_of("sm80_f16_f16_f32_f32_nt_64x64x32_w2x2_s2_a1") == "sm80_*_64x64x32_w2x2_s2_a1"
    with pytest.raises(ValueError):
        fit.config_of("cublas")


def test_fit_orders_by_measured_time_and_traces_sources(tmp_path):
    path = tmp_path / "h200_bf16.csv"
    write_sweep(path)
    out = tmp_path / "table.json"
    assert fit.main([str(path), "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    rules = table["families"]["sm90"]
    small_rule = next(r for r in rules if r.get("max_m") == 16)
    big_rule = next(r for r in rules if r.get("max_m") is None)
    assert small_rule["prefer"][0] == fit.config_of(SMALL)
    assert big_rule["prefer"][0] == fit.config_of(BIG)
    assert big_rule["geomean_vs_best"] == [1.0, 1.3]
    assert all(r["source"][0]["file"] == "h200_bf16.csv" and len(r["source"][0]["sha256"]) == 64
               for r in rules)
    assert "max_m" not in rules[-1]


def test_fitted_table_drives_selection(tmp_path, monkeypatch):
    path = tmp_path / "s.csv"
    write_sweep(path)
    table = fit.fit(*fit.read_rows([str(path)]))
    monkeypatch.setattr(_select, "table", lambda: table)

    def kern(i, name, tile, sched):
        return KernelInfo(i, name, 90, "bfloat16", "bfloat16", "float32", "bfloat16", "tn", tile,
                          (1, 1, 1), (0, 0, 0), 0, sched, "linear", "none", (8, 8, 8))

    ks = [kern(0, BIG, (128, 256, 64), "cooperative"), kern(1, SMALL, (64, 128, 64), "pingpong")]
    prob = lambda m: type("P", (), {"m": m, "n": 4096, "k": 4096, "sm_count": 132})  # noqa: E731
    assert _select.rank(prob(8), ks, [90]).ranked[0][0].name == SMALL
    assert _select.rank(prob(8192), ks, [90]).ranked[0][0].name == BIG


def test_sweep_grids_follow_the_benchmark_groups():
    decode = sweep.shapes(["decode"])
    assert len(decode) == 7 * 6 and (1, 14336, 4096) in decode
    assert sweep.shapes(["square", "square"]) == [(s, s, s) for s in (1024, 2048, 4096, 8192)]


def test_fit_rejects_files_without_the_columns(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("m,n\n1,2\n")
    with pytest.raises(SystemExit, match="missing columns"):
        fit.main([str(bad), "--out", str(tmp_path / "t.json")])
