"""heuristics/corpus.py: the real-model shape corpus, its checked-in CSV, the held-out split
by model family, and group K of the benchmark that reads it."""

import collections
import doctest
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "heuristics"))

import corpus  # noqa: E402
import datafiles  # noqa: E402

SCRIPT = os.path.join(ROOT, "heuristics", "corpus.py")
#: the checked-in file: an sdist ships no heuristics/data/ (pyproject.toml), a checkout must
needs_file = pytest.mark.skipif(
    not os.path.exists(corpus.CSV_PATH) and not os.path.exists(os.path.join(ROOT, ".git")),
    reason="an sdist: heuristics/data/ is not shipped",
)


@pytest.fixture(scope="module")
def rows():
    return corpus.load()


def cli(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


@needs_file
def test_csv_is_fresh(rows):
    text = datafiles.read_bytes(corpus.CSV_PATH).decode()
    assert text == corpus.render(corpus.rows()), "stale: run python heuristics/corpus.py --write"
    assert rows == corpus.rows()  # the loader reads back exactly what the writer wrote
    assert text.splitlines()[0].split(",") == list(corpus.COLUMNS)
    assert 1500 <= len(rows) <= 4000
    assert {s.corpus_version for s in rows} == {corpus.CORPUS_VERSION}
    assert corpus.CSV_PATH.endswith(f"shapes_v{corpus.CORPUS_VERSION}.csv.gz")
    assert corpus.CSV_PATH.startswith(os.path.join(ROOT, "heuristics", "data", "corpus", ""))


def test_without_the_data_folder_the_corpus_is_generated(monkeypatch, tmp_path):
    """From an sdist (no heuristics/data/) load() gives the rows the file would hold."""
    monkeypatch.setattr(corpus, "CSV_PATH", str(tmp_path / "absent.csv.gz"))
    generated = [s for s in corpus.rows() if s.part == "fit" and s.layout == "tn"]
    assert corpus.load("fit", "tn", path=corpus.CSV_PATH) == generated
    with pytest.raises(FileNotFoundError):
        corpus.load(path=str(tmp_path / "other.csv"))  # a file named, but not there


@needs_file
def test_cli_check_write_summary(tmp_path):
    assert cli("--check").returncode == 0
    lines = datafiles.read_bytes(corpus.CSV_PATH).decode().splitlines(keepends=True)
    stale = tmp_path / "stale.csv"
    stale.write_text("".join(lines[:-1]))  # one row short
    r = cli("--check", "--csv", str(stale))
    assert r.returncode == 1 and "stale" in r.stderr
    assert cli("--check", "--csv", str(tmp_path / "missing.csv")).returncode == 1
    fresh = tmp_path / "sub" / "fresh.csv"
    assert cli("--write", "--csv", str(fresh)).returncode == 0
    assert fresh.read_text() == "".join(lines)
    packed = tmp_path / "sub" / "fresh.csv.gz"  # as checked in: the same bytes
    assert cli("--write", "--csv", str(packed)).returncode == 0
    with open(corpus.CSV_PATH, "rb") as f:
        assert packed.read_bytes() == f.read()
    assert cli("--check", "--csv", str(packed)).returncode == 0
    out = cli("--summary").stdout
    assert f"{len(lines) - 1} rows" in out
    assert all(word in out for word in ("fit", "heldout", "decoder-moe", "tt", "batched"))
    assert cli().returncode != 0  # one action is required


def test_families_and_the_split(rows):
    fams = corpus.families()
    assert len(fams) >= 24 and len(corpus.MODELS) >= len(fams)
    assert len({m.model for m in corpus.MODELS}) == len(corpus.MODELS)
    assert all(len({m.kind for m in models}) == 1 for models in fams.values())
    parts = collections.defaultdict(set)
    for s in rows:
        parts[s.family].add(s.part)
    assert set(parts) == set(fams)  # every family has rows
    assert all(len(p) == 1 for p in parts.values()), "a family in both parts"
    held = {f for f, p in parts.items() if p == {"heldout"}}
    assert held == set(corpus.HELDOUT) and len(corpus.HELDOUT) == len(held)
    assert 0.25 <= len(held) / len(fams) <= 0.45
    assert {s.part for s in rows} == {"fit", "heldout"}
    kind = {f: models[0].kind for f, models in fams.items()}
    assert len({kind[f] for f in held}) >= 4
    assert {kind[f] for f in held} == set(corpus.KINDS)  # every kind has a held-out family
    assert {kind[f] for f in set(fams) - held} == set(corpus.KINDS)
    assert all(corpus.part(f) == p.pop() for f, p in parts.items())


def test_token_counts(rows):
    ms = [s.m for s in rows]
    assert all(1 <= m <= corpus.M_MAX for m in ms)
    assert sum(m & (m - 1) == 0 for m in ms) < 0.25 * len(ms)  # mostly not powers of two
    assert sum(m % 2 for m in ms) >= 0.5 * len(ms)  # at least half odd
    assert min(ms) == 1 and max(ms) > 8192  # the whole range is drawn
    decades = collections.Counter(len(str(m)) for m in ms)  # 1-9, 10-99, ..., 10000-16384
    assert all(decades[d] > 0.02 * len(ms) for d in range(1, 6)), decades
    # a few draws per projection in tn (fewer where a draw repeated a row of the family:
    # small M, and (N, K) that several projections or models of the family share)
    per = collections.Counter(
        (s.model, s.projection) for s in rows if (s.layout, s.batch) == ("tn", 1)
    )
    tn = [per[(m.model, p.name)] for m in corpus.MODELS for p in corpus.projections(m)]
    assert all(1 <= c <= corpus.M_PER_PROJECTION for c in tn)
    assert sum(c == corpus.M_PER_PROJECTION for c in tn) > 0.75 * len(tn)


def test_sources(rows):
    assert all(m.source.startswith("https://") for m in corpus.MODELS)
    assert all(s.source.startswith("https://") for s in rows)
    by_model = {m.model: m for m in corpus.MODELS}
    for s in rows:
        m = by_model[s.model]
        assert (s.family, s.kind, s.source) == (m.family, m.kind, m.source)


def test_layouts_batches_and_dedup(rows):
    assert {s.layout for s in rows} == {"tn", "tt", "nn"}
    for family in corpus.families():
        mine = [s for s in rows if s.family == family]
        assert {s.layout for s in mine if s.batch == 1} == {"tn", "tt", "nn"}, family
        assert any(s.batch > 1 for s in mine), family
        keys = [(s.layout, s.batch, s.m, s.n, s.k) for s in mine]
        assert len(keys) == len(set(keys)), family
    batched = [s for s in rows if s.batch > 1]
    assert all(2 <= s.batch <= corpus.MAX_L for s in batched)
    assert {s.layout for s in batched} == {"tn", "tt"}
    assert any(s.projection.startswith("expert_") for s in batched)


def test_dims_follow_the_derived_projections(rows):
    models = {m.model: m for m in corpus.MODELS}
    derived = {m.model: {p.name: (p.n, p.k) for p in corpus.projections(m)} for m in corpus.MODELS}
    for s in rows:
        assert s.n > 0 and s.k > 0 and s.batch >= 1, s
        dims = corpus.attention_dims(models[s.model])
        if s.projection == "attn_scores":  # Q K^T: K = a query/key head, N = keys >= queries
            assert s.batch > 1 and s.k in {qk for _, qk, _ in dims} and s.n >= s.m, s
        elif s.projection == "attn_context":  # P V: N = a value head, K = keys
            assert s.batch > 1 and s.n in {v for _, _, v in dims} and s.k >= s.m, s
        else:
            assert (s.n, s.k) == derived[s.model][s.projection], s
    # every projection of every model is in the corpus
    seen = {(s.model, s.projection) for s in rows}
    assert all((m, p) in seen for m, ps in derived.items() for p in ps)


@pytest.mark.parametrize(
    "model, projection, n, k",
    [
        ("meta-llama/Llama-3.1-8B", "k", 1024, 4096),
        ("meta-llama/Llama-3.1-8B", "lm_head", 128256, 4096),
        ("mistralai/Mistral-Nemo-Base-2407", "o", 5120, 4096),
        ("microsoft/Phi-3-mini-4k-instruct", "qkv", 9216, 3072),
        ("microsoft/Phi-3-mini-4k-instruct", "gate_up", 16384, 3072),
        ("tiiuae/falcon-7b", "qkv", 4544 + 2 * 64, 4544),
        ("openai-community/gpt2", "qkv", 3 * 768, 768),
        ("mistralai/Mixtral-8x7B-v0.1", "expert_gate", 14336, 4096),
        ("mistralai/Mixtral-8x7B-v0.1", "router", 8, 4096),
        ("deepseek-ai/DeepSeek-V3", "q_b", 128 * 192, 1536),
        ("deepseek-ai/DeepSeek-V3", "kv_a", 576, 7168),
        ("deepseek-ai/DeepSeek-V3", "kv_b", 128 * 256, 512),
        ("deepseek-ai/DeepSeek-V3", "o", 7168, 128 * 128),
        ("deepseek-ai/DeepSeek-V2-Lite", "q", 16 * 192, 2048),
        ("Qwen/Qwen1.5-MoE-A2.7B", "shared_expert_gate", 1, 2048),
        ("openai/gpt-oss-20b", "expert_gate_up", 5760, 2880),
        ("google/t5-v1_1-xxl", "gate", 10240, 4096),
        ("answerdotai/ModernBERT-base", "gate_up", 2304, 768),
        ("google/vit-huge-patch14-224-in21k", "patch_embed", 1280, 588),
        ("facebook/dinov2-giant", "gate_up", 8192, 1536),
        ("facebook/sam-vit-huge", "qkv", 3840, 1280),
        ("openai/whisper-large-v3", "conv1", 1280, 384),
        ("stable-diffusion-v1-5/stable-diffusion-v1-5", "xk@320", 320, 768),
        ("stable-diffusion-v1-5/stable-diffusion-v1-5", "gate_up@1280", 10240, 1280),
        ("stabilityai/stable-diffusion-xl-base-1.0", "xv@1280", 1280, 2048),
        ("facebook/DiT-XL-2-256", "adaLN_modulation", 6912, 1152),
        ("black-forest-labs/FLUX.1-dev", "single_blocks.linear1", 21504, 3072),
    ],
)
def test_known_projections(model, projection, n, k):
    (m,) = [m for m in corpus.MODELS if m.model == model]
    assert {p.name: (p.n, p.k) for p in corpus.projections(m)}[projection] == (n, k)


def test_attention_dims():
    by_model = {m.model: m for m in corpus.MODELS}
    assert corpus.attention_dims(by_model["tiiuae/falcon-7b"]) == [(71, 64, 64)]
    sd15 = by_model["stable-diffusion-v1-5/stable-diffusion-v1-5"]
    assert corpus.attention_dims(sd15) == [(8, 40, 40), (8, 80, 80), (8, 160, 160)]
    sdxl = by_model["stabilityai/stable-diffusion-xl-base-1.0"]
    assert corpus.attention_dims(sdxl) == [(10, 64, 64), (20, 64, 64)]
    assert corpus._per_rank(71) == 36 and corpus._per_rank(256) == 64 and corpus._per_rank(8) == 8


def test_load_filters(rows):
    held_tn = corpus.load("heldout", "tn")
    assert held_tn and all(s.part == "heldout" and s.layout == "tn" for s in held_tn)
    assert len(corpus.load("fit")) + len(corpus.load("heldout")) == len(rows)
    assert sum(len(corpus.load(layout=x)) for x in corpus.LAYOUTS) == len(rows)
    assert all(isinstance(s, corpus.Shape) for s in held_tn)
    with pytest.raises(ValueError, match="part"):
        corpus.load("held-out")
    with pytest.raises(ValueError, match="layout"):
        corpus.load(layout="nt")


def test_draws_are_stable_and_in_range():
    import random

    a = [corpus.draw_m(random.Random("x")) for _ in range(3)]
    assert a == [corpus.draw_m(random.Random("x")) for _ in range(3)]
    rng = random.Random(1)
    assert all(1 <= corpus.draw_m(rng, 7) <= 7 for _ in range(500))


def test_doctests():
    result = doctest.testmod(corpus)
    assert result.attempted >= 5 and result.failed == 0


def test_benchmark_group_k_is_the_held_out_tn_part():
    from benchmarks import shapes

    group = shapes.GROUPS["K"]
    held = [(s.m, s.n, s.k) for s in corpus.load("heldout", "tn") if s.batch == 1]
    got = [(s["m"], s["n"], s["k"]) for s in group.shapes]
    assert got == list(dict.fromkeys(held)) and len(got) > 500
    assert group.kind == "compare" and group.dtypes == ("bf16", "fp16", "fp8")
    assert all(s.get("layout", "tn") == "tn" and s.get("batch", 1) == 1 for s in group.shapes)
    fit = {(s.n, s.k) for s in corpus.load("fit")}
    assert any((n, k) not in fit for _, n, k in got)  # held-out families bring their own (N, K)


@pytest.mark.parametrize("layout", corpus.LAYOUTS)
def test_sweeps_draw_from_the_fit_part_only(layout):
    """heuristics/sweep.py --corpus-fit: every shape it times is a fit-part row, never one
    only the held-out part has; draws are reproducible."""
    from heuristics import sweep

    fit = {(s.m, s.n, s.k) for s in corpus.load("fit", layout) if s.batch == 1}
    assert set(sweep.corpus_shapes(layout, None)) == fit
    drawn = sweep.corpus_shapes(layout, 17, seed=3)
    assert len(drawn) == 17 and set(drawn) <= fit
    assert drawn == sweep.corpus_shapes(layout, 17, seed=3)
