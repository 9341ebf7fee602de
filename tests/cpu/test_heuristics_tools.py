"""The sweep -> fit -> table pipeline of heuristics/, on synthetic sweep data."""

import ast
import base64
import csv
import hashlib
import json
import math
import os
import sys
import types
import zlib

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "heuristics"))

import fit  # noqa: E402
import sweep  # noqa: E402

import pycutlass_rt as pcr  # noqa: E402
from pycutlass_rt import _model, _select, _table  # noqa: E402

SMALL = "sm90_bf16_bf16_f32_bf16_tn_64x128x64_c1x1_pingpong_a8"
BIG = "sm90_bf16_bf16_f32_bf16_tn_128x256x64_c2x1_coop_a8"
SK = "sm90_bf16_bf16_f32_bf16_tn_128x64x64_c1x1_coop_streamk_a8"
A100 = "sm80_bf16_bf16_f32_bf16_tn_128x128x32_w2x2_s4_a8"


def write_sweep(path, times, cc=90):
    """times: {(m, n, k): {kernel: us}}; rows in the given kernel order (their rank)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, sweep.COLUMNS)
        w.writeheader()
        for (m, n, k), per_kernel in times.items():
            for rank, (name, us) in enumerate(per_kernel.items()):
                w.writerow(
                    {
                        "gpu": "NVIDIA H200",
                        "sm_count": 132,
                        "cc": cc,
                        "driver": 12080,
                        "library": "x",
                        "dtype": "bfloat16",
                        "dtype_d": "bfloat16",
                        "layout": "tn",
                        "m": m,
                        "n": n,
                        "k": k,
                        "kernel": name,
                        "rank": rank,
                        "median_us": us,
                        "tflops": 1.0,
                    }
                )
    return str(path)


def small_vs_big(ms=(1, 16, 64, 512, 4096), n=4096):
    """Small tiles win (10 vs 13 us) at M <= 64, big tiles above."""
    return {
        (m, n, 4096): {SMALL: 10.0 if m <= 64 else 13.0, BIG: 13.0 if m <= 64 else 10.0} for m in ms
    }


def fitted(tmp_path, *sweeps, base=None):
    paths = [write_sweep(tmp_path / f"h200_{i}.csv", t) for i, t in enumerate(sweeps)]
    samples, sources, _ = fit.read_samples(paths)
    return fit.fit(samples, sources, base), samples, paths


def test_config_of():
    assert fit.config_of(BIG) == "sm90_*_128x256x64_c2x1_coop_a8"
    assert fit.config_of(SK) == "sm90_*_128x64x64_c1x1_coop_streamk_a8"
    assert (
        fit.config_of("sm80_f16_f16_f32_f32_nt_64x64x32_w2x2_s2_a1") == "sm80_*_64x64x32_w2x2_s2_a1"
    )
    with pytest.raises(ValueError):
        fit.config_of("cublas")


@pytest.mark.parametrize(
    "name, fields",
    [
        (
            SK,
            dict(
                family=90,
                tile=(128, 64, 64),
                cluster=(1, 1, 1),
                schedule="coop",
                split="streamk",
                align=(8, 8, 8),
            ),
        ),
        (BIG, dict(cluster=(2, 1, 1), schedule="coop", split="none")),
        (
            "sm80_bf16_bf16_f32_f32_tt_128x128x32_w2x2_s4_splitk_a8",
            dict(
                family=80,
                warps=(2, 2, 1),
                stages=4,
                schedule="multistage",
                split="splitk",
                dtype_d="float32",
                layout="tt",
            ),
        ),
        (
            "sm80_f16_f16_f32_f16_nn_64x64x32_w2x2_s2_a1",
            dict(schedule="pipelined", align=(1, 1, 1), dtype_a="float16"),
        ),
        ("sm100_bf16_bf16_f32_bf16_tn_256x128x64_c2x1_2sm_a8", dict(family=100, schedule="2sm")),
    ],
)
def test_kernel_names_decode_for_the_model(name, fields):
    k = fit.kernel_info(name)
    assert k.name == name and all(getattr(k, f) == v for f, v in fields.items())


def pick(table, m, n=4096, k=4096, names=(SMALL, BIG)):
    """The kernel (and why) the table's selection puts first for an m x n x k problem."""
    cands = [fit.kernel_info(name, i) for i, name in enumerate(names)]
    p = types.SimpleNamespace(m=m, n=n, k=k, sm_count=132, cc=90)
    first, why = _select.rank(p, cands, [90, 80, 75], table).ranked[0]
    return first.name, why


def test_fit_calibrates_the_model_by_features_and_traces_sources(tmp_path):
    table, samples, (path,) = fitted(tmp_path, small_vs_big())
    cal = table["calibration"]["sm90"]
    assert table["format"] in _table.TABLE_FORMATS and table["families"]["sm90"] == []
    digest = table["sources"][0]["sha256"]
    assert len(digest) == 64 and table["sources"][0]["rows"] == 10
    assert cal["source"] == [f"{path}@{digest[:16]}"] and (cal["samples"], cal["shapes"]) == (5, 5)
    # per configuration: weights of the expanded features, no M buckets or shapes
    assert cal["features"] == list(_model.FEATURES)
    assert set(cal["weights"]) == {fit.config_of(SMALL), fit.config_of(BIG)}
    assert all(len(w) == _model.WEIGHTS for w in cal["weights"].values())

    # the calibrated model is nearer what was measured than the model alone
    def error(corrected):
        total = 0.0
        for s in samples:
            for name, us in s.times.items():
                t = s.terms[name]
                r = fit.predicted(cal, fit.config_of(name), t)
                total += abs(math.log(t.us * math.exp(r if corrected else 0.0) / us))
        return total

    assert error(True) < 0.5 * error(False)


def test_calibrated_selection_picks_each_samples_fastest_kernel(tmp_path):
    table, samples, _ = fitted(tmp_path, small_vs_big())
    for s in samples:
        name, why = pick(table, s.m)
        assert name == min(s.times, key=s.times.get) and why.startswith("calibrated model")
    assert pick(table, 8)[0] == SMALL and pick(table, 8192)[0] == BIG  # between the samples


def test_neighbours_follow_what_the_fitted_function_cannot(tmp_path):
    """A step the quadratic cannot follow (small tiles win again at M = 2048 only): the
    fitted function alone misses swept shapes; with the neighbours of the table every
    swept shape gets its fastest kernel, and a shape far from the step keeps the function's
    choice."""
    times = small_vs_big()
    times[(2048, 4096, 4096)] = {SMALL: 6.0, BIG: 10.0}
    table, samples, _ = fitted(tmp_path, times)
    near = table["calibration"]["sm90"]["neighbours"]
    assert len(near["shapes"]) == len(samples) and set(near["configs"]) == {
        fit.config_of(SMALL),
        fit.config_of(BIG),
    }
    bare = json.loads(json.dumps(table))
    del bare["calibration"]["sm90"]["neighbours"]
    fastest = {s.m: min(s.times, key=s.times.get) for s in samples}
    assert any(pick(bare, m)[0] != name for m, name in fastest.items())
    assert all(pick(table, m)[0] == name for m, name in fastest.items())
    assert pick(table, 1 << 20)[0] == pick(bare, 1 << 20)[0]


def test_calibration_tells_few_tiles_from_many(tmp_path):
    """Few tiles (N = 4096): stream-K wins; many (N = 28672): the ping-pong tile."""
    times = {
        (m, n, 4096): {SK: 8.0 if n == 4096 else 30.0, SMALL: 10.0 if n == 4096 else 25.0}
        for m in (1, 16, 64)
        for n in (4096, 28672)
    }
    table = fitted(tmp_path, times)[0]
    assert pick(table, 16, n=4096, names=(SK, SMALL))[0] == SK
    assert pick(table, 16, n=28672, names=(SK, SMALL))[0] == SMALL


def test_each_calibration_names_the_sweeps_it_came_from(tmp_path):
    table, _, paths = fitted(tmp_path, small_vs_big(ms=(1, 16, 64)), small_vs_big(ms=(512, 4096)))
    assert [s.split("@")[0] for s in table["calibration"]["sm90"]["source"]] == paths


def test_source_paths_are_relative_to_the_repository():
    assert (
        fit.file_label(os.path.join(ROOT, "heuristics", "data", "sweeps", "h.csv.gz"), "ab" * 32)
        == "heuristics/data/sweeps/h.csv.gz@" + "ab" * 8
    )


def test_packed_sweeps_read_as_their_csv_with_its_digest(tmp_path):
    """A sweep packed into the data folder (datafiles.py) reads as the CSV it came from,
    and its digest is the CSV text's: packing leaves the digest a table names it by."""
    import doctest

    import datafiles

    assert doctest.testmod(datafiles).failed == 0
    plain = write_sweep(tmp_path / "s.csv", small_vs_big())
    packed = datafiles.pack(plain, str(tmp_path / "data") + os.sep)
    assert packed == str(tmp_path / "data" / "s.csv.gz")
    with open(plain, "rb") as f:
        text = f.read()
    with open(packed, "rb") as f:
        assert f.read(2) == b"\x1f\x8b" and len(f.read()) < len(text)  # gzip, smaller
    assert datafiles.read_bytes(packed) == text
    assert datafiles.digest(packed) == datafiles.digest(plain) == hashlib.sha256(text).hexdigest()
    first = open(packed, "rb").read()
    datafiles.pack(plain, packed)  # deterministic: no name or time in the header
    assert open(packed, "rb").read() == first
    (a, src_a, _), (b, src_b, _) = fit.read_samples([plain]), fit.read_samples([packed])
    assert [s.times for s in a] == [s.times for s in b] and src_a[0]["sha256"] == src_b[0]["sha256"]
    unpacked = datafiles.unpack(packed, str(tmp_path / "again") + os.sep)
    assert unpacked.endswith("s.csv") and open(unpacked, "rb").read() == text
    assert datafiles.main(["digest", packed]) == 0


def test_the_shipped_table_names_the_packed_sweeps_it_came_from():
    """heuristics/table_v1.json's sources are the data folder's packed sweeps, each still
    the digest the table names (--check verifies the same way)."""
    table = _table.read(os.path.join(ROOT, "heuristics", _table.TABLE_FILE))
    assert table["format"] == fit.TABLE_FORMAT and table["format"] in _table.TABLE_FORMATS
    files = [src["file"] for src in table["sources"]]
    assert files and all(f.startswith("heuristics/data/sweeps/") for f in files)
    assert all(f.endswith(".csv.gz") for f in files)
    if not os.path.isdir(os.path.join(ROOT, "heuristics", "data")):
        pytest.skip("an sdist: heuristics/data/ is not shipped")
    assert fit.verify_sources(table) == ([], [])


def test_check_verifies_the_digests_of_the_sweeps_a_table_names(tmp_path, capsys):
    path = write_sweep(tmp_path / "h200.csv", small_vs_big())
    out = tmp_path / "table.json"
    assert fit.main([path, "--out", str(out)]) == 0
    assert fit.main([path, "--check", str(out)]) == 0
    assert "1 sweeps it names match their digests" in capsys.readouterr().err
    with open(path, "a") as f:  # the sweep changed after the fit
        f.write(open(path).read().splitlines()[-1] + "\n")
    assert fit.main([path, "--check", str(out)]) == 1
    err = capsys.readouterr().err
    assert "differ from the digests" in err and "h200.csv" in err
    os.remove(path)
    assert fit.verify_sources(_table.read(str(out))) == ([], [path])


def small_calibration():
    """A calibration of this version's features, with neighbours and a second look."""
    trees = {"features": list(_model.PAIR_FEATURES), "base": -0.5, "tree_start": [0, 3]}
    trees.update(feature=[0, -1, -1, -1], threshold=[0.1, 0, 0, 0], left=[1, -1, -1, -1])
    trees.update(right=[2, -1, -1, -1], value=[0.0, 0.5, -0.5, 0.25])
    configs = {f"sm90_*_{64 * i}x128x64_c1x1_pingpong_a8": i for i in range(1, 4)}
    return {
        "features": list(_model.FEATURES),
        "weights": {
            c: [0.001 * (i + j) for j in range(_model.WEIGHTS)] for c, i in configs.items()
        },
        "neighbours": {
            "bandwidth": 0.25,
            "prior": 0.1,
            "shapes": [[m, 4096, 8192] for m in range(1, 70)],
            "configs": {  # the first configuration's shapes out of order, as refits give them
                c: {
                    "at": [(i * 7 + 5 * j) % 69 for j in range(80)],
                    "r": [0.0001 * (j - 40) * i for j in range(80)],
                    "w": [round(1 / (1 + j), 4) for j in range(80)],
                }
                for c, i in configs.items()
            },
        },
        "second_look": trees,
    }


def test_the_table_is_written_in_two_files_and_reads_back_exactly(tmp_path):
    """fit.write_table (format 7): JSON whose long number arrays are packed into one
    compressed buffer in a binary file beside it, ahead of which lie the ranking arrays the
    library takes; _table.read gives back every list and value exactly, ints as ints,
    floats bit for bit, and table()'s loading hands over the ranking arrays as they are."""
    values = [0.1 * i - 3.0 for i in range(100)] + [-0.0, 1e-300, 2.5e300, float("inf")]
    table = {
        "format": fit.TABLE_FORMAT,
        "families": {"sm90": [{"max_m": 64, "prefer": [SMALL] * 70}]},  # strings stay
        "calibration": {
            "sm90": {
                "weights": {"c": [float(v) for v in range(78)], "short": [1.5, 2.5]},
                "neighbours": {
                    "shapes": [[m, 4096, 8192] for m in range(1, 70)],
                    "configs": {"c": {"at": list(range(300)), "r": values, "w": [1] * 63}},
                },
                "second_look": {"feature": [-1, 0, 127] * 30, "big": [1 << 40] * 64},
                "mixed": [1, 2.0] * 40,
            },
            "sm80": small_calibration(),
        },
    }
    import doctest

    assert doctest.testmod(fit).failed == 0  # packed()'s examples
    path = tmp_path / "t.json"
    fit.write_table(table, str(path))
    binary = tmp_path / "t.bin"
    assert fit.binary_path(str(path)) == str(binary) and binary.exists()
    back = _table.read(str(path))
    assert json.dumps(back) == json.dumps(table)  # reprs: -0.0 and inf too
    cal = back["calibration"]["sm90"]
    assert [type(v) for v in cal["neighbours"]["configs"]["c"]["at"][:2]] == [int, int]
    assert cal["neighbours"]["shapes"][0] == [1, 4096, 8192]
    top = json.loads(path.read_text())
    packed = top["calibration"]["sm90"]
    assert packed["neighbours"]["configs"]["c"]["at"]["packed"] == "<i2"
    assert packed["second_look"]["feature"]["packed"] == "<i1"
    assert packed["second_look"]["big"]["packed"] == "<i8"
    assert packed["neighbours"]["shapes"]["shape"] == [69, 3]
    assert packed["mixed"] == [1, 2.0] * 40 and packed["weights"]["short"] == [1.5, 2.5]
    assert packed["neighbours"]["configs"]["c"]["w"] == [1] * 63  # below PACK_MIN
    assert list(top)[-2:] == ["ranking", "arrays"] and not {"ranking", "arrays"} & set(back)
    assert set(top["arrays"]) == {"file", "size", "sha256", "ranking", "lists"}
    # the ranking arrays: for the calibration of this version's features only
    assert list(top["ranking"]) == ["sm80"]
    want = _table.ranking_arrays(table["calibration"]["sm80"])
    assert set(top["ranking"]["sm80"]) == set(want) and "pair_value" in want
    loaded = _table._loaded(str(path))
    assert set(loaded["ranking"]) == {"sm80"} and loaded["families"] == table["families"]
    for field, items in want.items():
        assert bytes(loaded["ranking"]["sm80"][field]) == items.tobytes(), field
    # a binary file of another write, or changed, is refused
    data = binary.read_bytes()
    other = dict(table, about="another write")
    other["calibration"] = {"sm80": dict(small_calibration(), samples=1)}
    fit.write_table(other, str(tmp_path / "u.json"))
    binary.write_bytes((tmp_path / "u.bin").read_bytes())
    with pytest.raises(ValueError, match="not the binary file"):
        _table._loaded(str(path))
    binary.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # the lists' stream changed
    assert _table._loaded(str(path))["ranking"]  # a launch reads the ranking part only
    with pytest.raises(ValueError, match="sha256"):
        _table.read(str(path))
    binary.write_bytes(data)
    # ranking arrays this version would not compute (another version's writer): the lists
    top["ranking"] = {}
    path.write_text(json.dumps(top))
    assert "ranking" not in _table._loaded(str(path))
    assert json.dumps(_table._loaded(str(path))) == json.dumps(table)


def test_tables_of_format_6_and_before_read_back_and_rewrite(tmp_path):
    """Format 6 (the buffer deflated in hex digits in the JSON, or as the first format-6
    tables held it, base64 of a zlib stream) and plain format 5 read back exactly; fit.py
    --rewrite writes any of them as format 7, its content unchanged."""
    table = {
        "format": 6,
        "families": {"sm90": [{"prefer": [SMALL]}]},
        "calibration": {"sm80": small_calibration()},
    }
    out, buffer = fit.compact(table)
    out["arrays"] = {"size": len(buffer), "deflate": fit._deflated(buffer).hex()}
    path = tmp_path / "six.json"
    path.write_text(json.dumps(out, separators=(",", ":")))
    assert json.dumps(_table.read(str(path))) == json.dumps(table)
    out["arrays"]["size"] += 1  # a buffer of another length than it says: refused
    path.write_text(json.dumps(out))
    with pytest.raises(ValueError, match="packed arrays of"):
        _table.read(str(path))
    out["arrays"] = base64.b64encode(zlib.compress(bytes(buffer))).decode()
    path.write_text(json.dumps(out))
    assert json.dumps(_table.read(str(path))) == json.dumps(table)
    plain = tmp_path / "plain.json"  # format 5 and before: plain JSON, read as it is
    plain.write_text(json.dumps(table, indent=1))
    assert json.dumps(_table.read(str(plain))) == json.dumps(table)
    assert json.dumps(_table._loaded(str(plain))) == json.dumps(table)
    assert fit.main(["--rewrite", str(path)]) == 0
    assert json.loads(path.read_text())["format"] == fit.TABLE_FORMAT
    assert (tmp_path / "six.bin").exists()
    assert json.dumps(_table.read(str(path))) == json.dumps(dict(table, format=fit.TABLE_FORMAT))
    with pytest.raises(SystemExit):
        fit.main([str(plain), "--rewrite", str(path)])  # it takes no sweeps


def test_unmeasured_configurations_follow_in_model_order(tmp_path):
    table = fitted(tmp_path, small_vs_big())[0]
    ranked = [
        (k.name, why)
        for k, why in _select.rank(
            types.SimpleNamespace(m=16, n=4096, k=4096, sm_count=132, cc=90),
            [fit.kernel_info(name, i) for i, name in enumerate((SK, BIG, SMALL))],
            [90],
            table,
        ).ranked
    ]
    assert [n for n, _ in ranked[:2]] == [SMALL, BIG]
    assert ranked[2][0] == SK and ranked[2][1].startswith("analytic model")


def test_the_gpus_calibration_covers_every_family_that_runs_there(tmp_path):
    """On an H200 an sm80 kernel competes with the sm90 ones; an A100 table stays as is."""
    times = {k: {**v, A100: 5.0} for k, v in small_vs_big().items()}  # sm80 wins everywhere
    fallback = "sm80_bf16_bf16_f32_bf16_tn_64x64x32_w2x2_s2_a1"
    times[(1, 4096, 4096)][fallback] = 1.0  # fastest, but fallbacks are left out of the fit
    path = write_sweep(tmp_path / "h200.csv", times)
    samples, sources, skipped = fit.read_samples([path])
    assert skipped == 1 and {s.family for s in samples} == {90}
    base = {"format": 1, "families": {"sm80": [{"prefer": ["sm80_*_hand"]}], "sm90": []}}
    table = fit.fit(samples, sources, base)
    assert table["families"]["sm80"] == [{"prefer": ["sm80_*_hand"]}]
    assert set(table["calibration"]) == {"sm90"}
    name, why = pick(table, 16, names=(SMALL, BIG, A100))
    assert name == A100 and why.startswith("calibrated model")


def test_hand_rules_of_a_calibrated_family_stay_first(tmp_path):
    hand = {"max_m": 64, "max_n": 64, "prefer": [SMALL], "source": ["hand: launch-bound"]}
    old_fit = {"max_m": 9, "prefer": [BIG], "source": ["old.csv@0"]}
    base = {"format": 1, "families": {"sm90": [hand, old_fit]}}
    table, _, _ = fitted(tmp_path, small_vs_big(), base=base)
    assert table["families"]["sm90"] == [hand]
    assert pick(table, 64, n=64, k=64, names=(BIG, SMALL)) == (SMALL, f"table rule {SMALL!r}")


def test_check_reports_regret_per_selector(tmp_path):
    """Four shapes: the table picks BIG everywhere, the sweep's rank 0 was SMALL."""
    times = {
        (m, 4096, 4096): {SMALL: 10.0, BIG: us}
        for m, us in ((1, 20.0), (16, 10.4), (512, 8.0), (4096, 5.0))
    }
    samples, _, _ = fit.read_samples([write_sweep(tmp_path / "s.csv", times)])
    table = {"format": 1, "families": {"sm90": [{"prefer": ["sm90_*_128x256x64_c2x1_coop_a8"]}]}}
    report = fit.check(table, samples)["sm90"]
    ratios = [10 / 20, 10 / 10.4, 1.0, 1.0]
    assert report["table"]["geomean"] == round(math.prod(ratios) ** 0.25, 4)
    assert report["table"]["within_5pct"] == 75.0
    assert report["table"]["worst"][0] == "1x4096x4096 0.500"
    swept = [1.0, 1.0, 8 / 10, 5 / 10]
    assert report["when swept"]["geomean"] == round(math.prod(swept) ** 0.25, 4)
    assert report["when swept"]["within_5pct"] == 50.0
    assert 0 < report["model only"]["geomean"] <= 1 and report["model only"]["samples"] == 4


def test_cli_fits_then_checks(tmp_path, capsys):
    path = write_sweep(tmp_path / "h200.csv", small_vs_big())
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"format": 1, "families": {"sm75": [{"prefer": ["x"]}]}}))
    out = tmp_path / "table.json"
    assert fit.main([path, "--base", str(base), "--out", str(out)]) == 0
    out_text = capsys.readouterr().out
    assert "sm90   table       best/chosen geomean 1.000, 100.0% within 5%" in out_text
    assert set(_table.read(str(out))["families"]) == {"sm75", "sm90"}
    assert fit.main([path, "--check", str(out)]) == 0
    assert "sm90   when swept" in capsys.readouterr().out


def test_fitting_refuses_the_corpus_held_out_part(tmp_path):
    """A sweep of held-out shapes judges a table (--check) but never fits one."""
    from heuristics import corpus

    fit_shapes = {(s.m, s.n, s.k) for s in corpus.load("fit")}
    held = next(
        (s.m, s.n, s.k) for s in corpus.load("heldout", "tn") if (s.m, s.n, s.k) not in fit_shapes
    )
    path = write_sweep(tmp_path / "h.csv", {held: {SMALL: 10.0, BIG: 12.0}})
    with pytest.raises(SystemExit, match="held-out part"):
        fit.main([path, "--out", str(tmp_path / "t.json")])
    table = {"format": 3, "families": {"sm90": [{"prefer": [SMALL]}]}}
    (tmp_path / "t.json").write_text(json.dumps(table))
    assert fit.main([path, "--check", str(tmp_path / "t.json")]) == 0


def test_check_reports_the_choice_against_the_peer(tmp_path):
    """sweep.py --peer rows: the chosen kernel and the build's best against cuBLAS."""
    path = write_sweep(
        tmp_path / "s.csv",
        {
            (1, 4096, 4096): {SMALL: 10.0, BIG: 20.0, sweep.PEER: 10.0},
            (4096, 4096, 4096): {SMALL: 20.0, BIG: 10.0, sweep.PEER: 12.0},
        },
    )
    samples, _, _ = fit.read_samples([path])
    assert sorted(s.peer_us for s in samples) == [10.0, 12.0]
    assert all(sweep.PEER not in s.times for s in samples)
    table = {"format": 3, "families": {"sm90": [{"prefer": [SMALL]}]}}
    peer = fit.check(table, samples)["sm90"]["vs peer"]
    assert peer["samples"] == 2 and peer["below_085"] == 1  # 12 / 20 = 0.6, 10 / 10 = 1
    assert peer["chosen"] == round((1.0 * 12 / 20) ** 0.5, 4)
    assert peer["best"] == round((1.0 * 12 / 10) ** 0.5, 4)


def test_sweep_grids_follow_the_benchmark_groups():
    decode = sweep.shapes(["decode"])
    assert len(decode) == 7 * 6 and (1, 14336, 4096) in decode
    assert sweep.shapes(["square", "square"]) == [(s, s, s) for s in (1024, 2048, 4096, 8192)]
    assert {"cc", "rank", "median_us", "kernel"} <= set(sweep.COLUMNS)


def test_sweep_writes_what_fit_reads(tmp_path, monkeypatch, capsys):
    """sweep.main on fakes: candidates in selection order, a failing kernel skipped, a
    shape whose operands do not fit skipped (the sweep goes on)."""
    import contextlib

    import pycutlass_rt as pcr
    from pycutlass_rt import _cache, _tune

    times = {SMALL: 10.0, BIG: 13.0, SK: None}
    monkeypatch.setattr(pcr._lib, "load", lambda: types.SimpleNamespace(last_error=str))
    monkeypatch.setattr(pcr, "kernels", lambda: [])
    monkeypatch.setattr(
        _cache,
        "device_key",
        lambda lib, dev, names: {
            "gpu": "NVIDIA H200",
            "sm_count": 132,
            "driver": 12080,
            "build": "b1",
        },
    )
    monkeypatch.setattr(
        _tune, "backend", lambda: types.SimpleNamespace(device=lambda i: contextlib.nullcontext())
    )
    made = []

    def make_operands(bk, spec):
        made.append(spec)
        if len(made) == 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 786.00 MiB")
        return types.SimpleNamespace(call=lambda name: name, spec=spec)

    monkeypatch.setattr(_tune, "make_operands", make_operands)
    # the problem as computed: this stand-in orients every problem as D^T = B^T A^T
    monkeypatch.setattr(
        _tune,
        "describe",
        lambda lib, ops: types.SimpleNamespace(
            problem=types.SimpleNamespace(cc=90, m=ops.spec.n, n=ops.spec.m, k=ops.spec.k)
        ),
    )
    monkeypatch.setattr(_tune, "candidates", lambda lib, j: [fit.kernel_info(n) for n in times])

    def time_us(bk, name, reps):
        if times[name] is None:
            raise pcr.CudaError("cudaErrorLaunchFailure")
        return times[name]

    monkeypatch.setattr(_tune, "time_us", time_us)
    out = tmp_path / "sweeps" / "h200.csv"
    assert sweep.main(["--out", str(out), "--grid", "awkward", "--layouts", "tn"]) == 0
    rows = list(csv.DictReader(open(out)))
    assert len(made) == 8 and len(rows) == 7 * 2 and {r["rank"] for r in rows} == {"0", "1"}
    assert rows[0]["cc"] == "90" and rows[0]["library"] == "b1"
    assert (rows[0]["m"], rows[0]["n"], rows[0]["k"]) == ("1000", "127", "4097")  # as computed
    err = capsys.readouterr().err
    assert "cudaErrorLaunchFailure" in err and "skipped, operands do not fit" in err
    samples, _, _ = fit.read_samples([str(out)])
    assert len(samples) == 7 and all(s.order == [SMALL, BIG] for s in samples)


def test_sweeps_are_written_plain_and_packed_after(tmp_path):
    """sweep.py flushes plain CSV per shape (a sweep cut short resumes): a packed --out is
    refused, with the way to pack one."""
    with pytest.raises(SystemExit, match="datafiles.py pack"):
        sweep.main(["--out", str(tmp_path / "s.csv.gz")])


def _privates(tree) -> set:
    """pycutlass_rt's private modules a module's code reaches (imports, ``pcr._x``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pycutlass_rt"):
            parts = node.module.split(".")
            if len(parts) > 1 and parts[1].startswith("_"):
                out.add(parts[1])
            elif len(parts) == 1:
                out |= {a.name for a in node.names if a.name.startswith("_")}
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "pycutlass_rt" and len(parts) > 1 and parts[1].startswith("_"):
                    out.add(parts[1])
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("pcr", "pycutlass_rt")
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            out.add(node.attr)
    return out


def test_tool_folders_depend_one_way_and_name_the_internal_api_they_use():
    """benchmarks/ imports heuristics/, never the reverse; a private module of pycutlass_rt
    a tool reaches is named in its module docstring (in benchmarks/, or the package's)."""
    docs = {}
    for folder in ("heuristics", "benchmarks"):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                with open(os.path.join(ROOT, folder, name)) as f:
                    docs[f"{folder}/{name}"] = ast.parse(f.read())
    package = ast.get_docstring(docs["benchmarks/__init__.py"]) or ""
    used = {}
    for path, tree in docs.items():
        imported = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                imported |= {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom):
                imported.add(n.module or "")
        if path.startswith("heuristics/"):
            assert not any(m.split(".")[0] == "benchmarks" for m in imported), path
        doc = (ast.get_docstring(tree) or "") + (package if path.startswith("bench") else "")
        for private in _privates(tree):
            used[path] = used.get(path, set()) | {private}
            assert f"pycutlass_rt.{private}" in doc, f"{path}: {private} not in its docstring"
    assert used["heuristics/fit.py"] >= {"_select", "_model", "_table"}  # the check sees them


def test_fit_rejects_files_without_the_columns(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("m,n\n1,2\n")
    with pytest.raises(SystemExit, match="missing columns"):
        fit.main([str(bad), "--out", str(tmp_path / "t.json")])


def test_tier_adds_what_covers_most_per_compile_second(tmp_path):
    """Greedy coverage: the kernel that closes the most of the gap to the best per second
    of compile time first; it stops at the target; kept kernels cost nothing."""
    import tier

    times = {
        (1, 4096, 4096): {SMALL: 10.0, BIG: 20.0, SK: 11.0},
        (16, 4096, 4096): {SMALL: 10.0, BIG: 15.0, SK: 10.5},
        (4096, 4096, 4096): {SMALL: 13.0, BIG: 10.0, SK: 12.0},
    }
    samples, _, _ = fit.read_samples([write_sweep(tmp_path / "s.csv", times)])
    assert tier.coverage(samples, {BIG}) == pytest.approx((0.5 * 10 / 15 * 1.0) ** (1 / 3))
    assert tier.coverage(samples, {SMALL, BIG}) == 1.0 and tier.coverage(samples, set()) == 0.0
    costs = {SMALL: 40.0, BIG: 40.0, SK: 40.0}
    steps = tier.greedy(samples, costs, keep={BIG}, target=1.0)
    assert [name for name, _, _ in steps] == [SMALL] and steps[-1][2] == 1.0
    cheap_sk = tier.greedy(samples, {**costs, SK: 10.0}, keep={BIG}, target=0.99)
    assert cheap_sk[0][0] == SK  # 4x cheaper, nearly as good: taken first
    assert tier.compile_seconds([BIG]) == {BIG: 40.0}  # one sm90a kernel, one SASS target


@pytest.mark.parametrize(
    "dtype,call",
    [("bfloat16", "mm"), ("float16", "mm"), ("float8_e4m3fn", "_scaled_mm"), ("int8", "_int_mm")],
)
def test_sweep_peer_is_torchs_call_for_the_dtype(monkeypatch, dtype, call):
    """--peer times torch's own call on the kernels' operand copies, cycling them alike."""
    calls = []
    fake = types.SimpleNamespace(
        float32="f32",
        ones=lambda *a, **k: types.SimpleNamespace(reshape=lambda *s: "one"),
        mm=lambda a, b, out: calls.append(("mm", a, out)),
        _int_mm=lambda a, b, out: calls.append(("_int_mm", a, out)),
        _scaled_mm=lambda a, b, sa, sb, out_dtype, out: calls.append(("_scaled_mm", a, out)),
    )
    monkeypatch.setitem(sys.modules, "torch", fake)
    d = types.SimpleNamespace(dtype="out")
    ops = types.SimpleNamespace(sets=[("a0", "b", None, d), ("a1", "b", None, d)], extras={})
    run = sweep.peer_call(
        types.SimpleNamespace(name="torch"), ops, types.SimpleNamespace(dtype=dtype)
    )
    run(), run(), run()
    assert [c[0] for c in calls] == [call] * 3 and [c[1] for c in calls] == ["a0", "a1", "a0"]
    with pytest.raises(SystemExit, match="needs torch"):
        sweep.peer_call(types.SimpleNamespace(name="cupy"), ops, types.SimpleNamespace(dtype=dtype))


def test_cross_validation_judges_each_group_on_a_fit_without_it(tmp_path):
    """--cv: every grouped sample judged once, by a fit that never saw its group; samples
    without a group always fit and are never judged. Small tiles win below M = 64 and big
    ones above, so a fit without one M still picks right on it."""
    ms = (1, 2, 4, 8, 16, 32, 2048, 4096, 8192, 16384)
    _, samples, (path,) = fitted(tmp_path, small_vs_big(ms))
    group_of = lambda s: None if s.m == 1 else s.m  # noqa: E731
    report = fit.cross_validate(samples, 3, group_of)
    ((source, (gm, close, n)),) = report.items()
    assert source.startswith(path) and n == len(ms) - 1
    assert gm == 1.0 and close == 100.0
    # a step only M = 2048 shows (small tiles win there again): in sample the neighbours
    # follow it (test above); judged by fits without each shape, choices miss
    times = small_vs_big(ms)
    times[(2048, 4096, 4096)] = {SMALL: 6.0, BIG: 10.0}
    table, samples, _ = fitted(tmp_path, times)
    ((in_sample,),) = [[r["table"]["within_5pct"] for r in fit.check(table, samples).values()]]
    ((gm, close, n),) = fit.cross_validate(samples, len(ms), lambda s: s.m).values()
    assert in_sample == 100.0 and n == len(ms) and close < 100.0 and gm < 1.0


# ---- the second look ------------------------------------------------------------------

SWAP = "sm90_bf16_bf16_f32_bf16_tn_16x64x128_c1x1_pingpong_swapab_a8"
PAIRS = [((16, 8192, 4096), SWAP, SMALL), ((300, 3000, 4096), BIG, SK)]


def plain_calibration(names):
    """Zero weights for each kernel's configuration: calibrated time = model time."""
    weights = {fit.config_of(n): [0.0] * _model.WEIGHTS for n in names}
    return {"features": list(_model.FEATURES), "weights": weights}


def one_split(feature, threshold, left, right):
    """A second look of one tree: feature <= threshold adds `left`, else `right`."""
    return {
        "features": list(_model.PAIR_FEATURES),
        "base": 0.0,
        "tree_start": [0],
        "feature": [feature, -1, -1],
        "threshold": [threshold, 0.0, 0.0],
        "left": [1, -1, -1],
        "right": [2, -1, -1],
        "value": [0.0, left, right],
    }


def sample_of(shape, names):
    m, n, k = shape
    s = fit.Sample(90, m, n, k, "x", 132, 90)
    s.times = {name: 1.0 for name in names}
    return s


def first_of(s, cal):
    kern, reason, _ = fit.ranking(s, {"families": {}, "calibration": {"sm90": cal}})[0]
    return kern.name, reason


@pytest.mark.parametrize("shape,x,y", PAIRS, ids=["swap-AB", "stream-K"])
@pytest.mark.parametrize("feature", range(len(_model.PAIR_FEATURES)))
def test_the_libraries_pair_features_are_the_fitters(shape, x, y, feature):
    """A tree that splits on one feature exactly at the value fit.pair_features gives it
    swaps the leading pair (<= goes left, +1) and, a hair below it, does not: pcr_rank
    computes each feature as the fitter learns from it."""
    s = sample_of(shape, (x, y))
    base = plain_calibration((x, y))
    a, b, us_a, us_b = fit.leading_pair(s, {"families": {}, "calibration": {"sm90": base}})
    v = fit.pair_features(s, a, b, us_a, us_b)[feature]
    below = v - 1e-9 * max(abs(v), 1.0)
    assert first_of(s, {**base, "second_look": one_split(feature, v, 1.0, -1.0)}) == (
        b.name,
        _select.RankReason.RANK_SECOND_LOOK,
    )
    assert first_of(s, {**base, "second_look": one_split(feature, below, 1.0, -1.0)}) == (
        a.name,
        _select.RankReason.RANK_CALIBRATED,
    )


def test_a_second_look_of_another_version_is_ignored():
    s = sample_of(PAIRS[0][0], PAIRS[0][1:])
    base = plain_calibration(PAIRS[0][1:])
    alien = {**one_split(0, 1e9, 1.0, 1.0), "features": ["something", "else"]}
    assert first_of(s, {**base, "second_look": alien}) == first_of(s, base)


@pytest.mark.parametrize(
    "damage",
    [{"tree_start": [3]}, {"left": [0, -1, -1]}, {"feature": [99, -1, -1]}, {"right": [2, -1]}],
    ids=["root out of range", "child before parent", "unknown feature", "short arrays"],
)
def test_malformed_trees_are_refused(damage):
    s = sample_of(PAIRS[0][0], PAIRS[0][1:])
    trees = {**one_split(0, 0.0, 1.0, -1.0), **damage}
    with pytest.raises(pcr.InvalidArgumentError):
        first_of(s, {**plain_calibration(PAIRS[0][1:]), "second_look": trees})


def test_boosting_learns_a_rule_and_keeps_children_after_parents():
    """y = 1 where x0 > 0.3 and x1 < 0 (noise-free): the trees' score separates the rows,
    and every node's children come after it (what pcr_ranker_create checks)."""
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (600, 3))
    y = ((x[:, 0] > 0.3) & (x[:, 1] < 0)).astype(float)
    trees = fit.boost(x, y, np.ones(len(y)))

    def score(row):
        total = trees["base"]
        for node in trees["tree_start"]:
            while trees["feature"][node] >= 0:
                go_left = row[trees["feature"][node]] <= trees["threshold"][node]
                node = trees["left"][node] if go_left else trees["right"][node]
            total += trees["value"][node]
        return total

    assert np.mean([(score(r) > 0) == bool(t) for r, t in zip(x, y)]) > 0.98
    for i, f in enumerate(trees["feature"]):
        if f >= 0:
            assert trees["left"][i] > i and trees["right"][i] > i


def test_peer_kernels_picks_the_shapes_the_peer_leads(tmp_path):
    """heuristics/peer_kernels.py profiles cuBLAS where even the sweep's best kernel trails
    it: picked from the sweep's peer rows, slowest first; a sweep without such a shape is
    refused before anything needs a GPU."""
    import doctest

    from heuristics import peer_kernels

    assert doctest.testmod(peer_kernels).failed == 0
    kernels = {
        (8, 4096, 4096): {SMALL: 10.0, BIG: 12.0},
        (300, 4096, 4096): {SMALL: 20.0, BIG: 16.0},
        (4096, 4096, 4096): {BIG: 100.0},
        (64, 64, 64): {SMALL: 5.0},  # no peer row
    }
    peers = {  # in a file of their own, as sweep.py --peer --kernels none writes them
        (8, 4096, 4096): {sweep.PEER: 9.0},  # 0.9x
        (300, 4096, 4096): {sweep.PEER: 12.0},  # 0.75x
        (4096, 4096, 4096): {sweep.PEER: 104.0},  # ahead
    }
    paths = [write_sweep(tmp_path / "k.csv", kernels), write_sweep(tmp_path / "p.csv", peers)]
    rows = [r for p in paths for r in csv.DictReader(open(p, newline=""))]
    picked = peer_kernels.lagging(rows, 0.95)
    assert [(r["m"], r["best"], r["ratio"]) for r in picked] == [
        ("300", BIG, 0.75),
        ("8", SMALL, 0.9),
    ]
    with pytest.raises(SystemExit, match="no shape with a peer row below 0.5x"):
        peer_kernels.main([*paths, "--below", "0.5", "--out", str(tmp_path / "o.csv")])
