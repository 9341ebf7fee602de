#!/usr/bin/env python3
"""A versioned corpus of real models' GEMM shapes, split by model family (issue 29).

The selection table (``table_v1.json``) is fitted on sweeps of hand-made grids
(``sweep.py --grid``: the benchmark's groups A-D and long-K shapes). To say how it
chooses for shapes nobody swept, this module
declares published model configurations (:data:`MODELS`), derives each model's linear
projections from them (:func:`projections`), draws token counts for each, and assigns
whole model families, never single rows, to a ``fit`` or a ``heldout`` part
(:data:`HELDOUT`): a model family seen while fitting would leak its (N, K) pairs into the
held-out figures.

Layouts name A then B, ``t`` = row-major and ``n`` = column-major (the library's
kernel-name convention); D is row-major. A projection ``y = x @ W.T`` with x of (M, K)
and W of (N, K), both row-major (PyTorch's ``nn.Linear``), is ``tn``. The corpus adds per
family a few ``tt`` rows (weights stored (K, N), as JAX/Flax ``Dense`` kernels and GPT-2's
``Conv1D`` keep them), ``nn`` rows (channels-first activations, as a 1x1 convolution of
an NCHW feature map, times W.T) and batched rows (per-head attention, per-expert GEMMs).

The CSV (``data/corpus/shapes_v1.csv.gz``, gzip-compressed like the sweeps beside it:
datafiles.py) is generated and checked in::

    python heuristics/corpus.py --write      # regenerate
    python heuristics/corpus.py --check      # exit 1 if the file is stale
    python heuristics/corpus.py --summary    # rows per part, kind and layout

Tools read it with :func:`load` (stdlib only); where the data folder is absent (an sdist
ships none), :func:`load` generates the same rows from this module. Changing what a row holds (a model's
numbers, the draws) changes the corpus: bump :data:`CORPUS_VERSION` and write a new file,
so that figures quoted against ``v1`` stay reproducible.

>>> len({m.family for m in MODELS}) >= 24
True
>>> sorted({s.part for s in load()})
['fit', 'heldout']
"""

from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import io
import math
import os
import random
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # run as a script: heuristics.datafiles from the checkout

from heuristics import datafiles  # noqa: E402

CORPUS_VERSION = 1
#: base of every random draw; each draw seeds its own generator from this and the names of
#: what it draws for, so adding a model leaves the other models' rows as they were
SEED = 29
M_MAX = 16384
#: token counts per projection in tn
M_PER_PROJECTION = 4
#: per family: rows in each of the other layouts, and batched rows of each sort
OTHER_LAYOUT_ROWS = 3
BATCHED_ROWS = 2
#: batched rows keep M and the key length to this, so that L x M x N stays a few GiB
BATCHED_M_MAX = 4096
#: the largest batch L (the attention heads one GPU holds, experts of one rank)
MAX_L = 64
#: share of even draws turned odd: real token counts are rarely tidy, and an odd M is the
#: case tile and alignment choices get wrong
ODD_SHARE = 0.4

CSV_PATH = os.path.join(datafiles.CORPUS, f"shapes_v{CORPUS_VERSION}.csv.gz")
COLUMNS = (
    "corpus_version",
    "family",
    "model",
    "kind",
    "source",
    "projection",
    "part",
    "layout",
    "batch",
    "m",
    "n",
    "k",
)
KINDS = ("decoder-dense", "decoder-moe", "encoder", "vit", "speech", "diffusion-unet", "dit")
PARTS = ("fit", "heldout")
LAYOUTS = ("tn", "tt", "nn")


def _hf(model: str, path: str = "config.json") -> str:
    """The Hugging Face URL of ``model``'s config file."""
    return f"https://huggingface.co/{model}/blob/main/{path}"


@dataclass(frozen=True)
class Model:
    """One model's published configuration: what its linear layers are derived from.

    Attributes:
        family: the model family; the unit the fit/held-out split assigns.
        model: the model id (Hugging Face ``owner/name``).
        kind: one of :data:`KINDS`.
        hidden: the residual width (``hidden_size``, ``d_model``); for a UNet, that of
            its first transformer level (see ``widths``).
        intermediate: the MLP width of dense layers (0: no dense MLP, as in an all-MoE
            model).
        heads: attention (query) heads; with ``widths`` and ``head_dim`` 0, the heads
            of every level.
        kv_heads: key/value heads (grouped or multi-query attention); 0 = ``heads``.
        head_dim: the width of a head; 0 = ``hidden // heads``. For MLA: the no-RoPE
            part of a query/key head (``qk_nope_head_dim``).
        vocab: outputs of the final head (vocabulary, CTC letters, classes); 0 = none.
        fused_qkv: the checkpoint holds Q, K and V as one matrix (one GEMM).
        gated: the MLP is gated (SwiGLU, GEGLU): gate and up, then down.
        fused_gate_up: gate and up are one matrix (one GEMM of twice the width).
        experts: routed experts of an MoE layer (0: dense).
        expert_intermediate: each routed expert's MLP width.
        shared_intermediate: the always-on shared expert(s)' width, all of them together.
        shared_gate: a (1, hidden) sigmoid gate scales the shared expert (Qwen MoE).
        q_lora_rank: MLA: rank of the query's low-rank down-projection (0: a full one).
        kv_lora_rank: MLA: rank of the compressed key/value (0: not MLA).
        rope_head_dim: MLA: the decoupled RoPE part of a query/key head.
        v_head_dim: MLA: the width of a value head.
        cross_dim: width of the cross-attention's context (k/v input); 0: none.
        widths: a UNet's transformer levels: each is a block with ``hidden``,
            ``intermediate`` (and ``heads`` or ``head_dim``) scaled to its width.
        extra: ``(name, N, K)`` of the model's other linears (patch embeddings as GEMMs
            over im2col patches, adaLN modulation, timestep embedders, projections).
        source: URL of the configuration the numbers come from (default: the model's
            Hugging Face ``config.json``).
    """

    family: str
    model: str
    kind: str
    hidden: int
    intermediate: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    vocab: int = 0
    fused_qkv: bool = False
    gated: bool = False
    fused_gate_up: bool = False
    experts: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0
    shared_gate: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0
    v_head_dim: int = 0
    cross_dim: int = 0
    widths: tuple = ()
    extra: tuple = ()
    source: str = ""

    def __post_init__(self):
        if not self.source:  # a frozen dataclass sets a derived field through object
            object.__setattr__(self, "source", _hf(self.model))
        if self.kind not in KINDS:
            raise ValueError(f"{self.model}: unknown kind {self.kind!r}")
        if not (self.heads or self.head_dim):
            raise ValueError(f"{self.model}: give heads or head_dim")
        if bool(self.experts) != bool(self.expert_intermediate):
            raise ValueError(f"{self.model}: experts and expert_intermediate go together")

    @property
    def head_width(self) -> int:
        """The width of a query/key head (``head_dim``, else ``hidden // heads``)."""
        return self.head_dim or self.hidden // self.heads


@dataclass(frozen=True)
class Projection:
    """One linear layer as a GEMM: ``y = x @ W.T``, W of shape (n, k)."""

    name: str
    n: int
    k: int


@dataclass(frozen=True)
class Shape:
    """One row of the corpus CSV (:data:`COLUMNS`): a GEMM of ``batch`` x (m, n, k)."""

    corpus_version: int
    family: str
    model: str
    kind: str
    source: str
    projection: str
    part: str
    layout: str
    batch: int
    m: int
    n: int
    k: int

    @classmethod
    def from_row(cls, row: dict) -> Shape:
        """A Shape from a ``csv.DictReader`` row (strings)."""
        ints = ("corpus_version", "batch", "m", "n", "k")
        return cls(**{c: int(row[c]) if c in ints else row[c] for c in COLUMNS})


def _family(family: str, kind: str, rows: list, path: str = "config.json", **common) -> tuple:
    """The :class:`Model` rows of one family.

    Args:
        family: the family's name.
        kind: one of :data:`KINDS`.
        rows: per model ``(id, hidden, intermediate, heads, kv_heads, head_dim, vocab)``
            (0: the field's default), then optionally a dict of its other fields.
        path: the configuration's file in each model's repository (the ``source``).
        **common: fields every model of the family shares.
    """
    out = []
    for model, hidden, intermediate, heads, kv_heads, head_dim, vocab, *more in rows:
        fields = dict(common, **(more[0] if more else {}))
        fields.setdefault("source", _hf(model, path))
        dims = (hidden, intermediate, heads, kv_heads, head_dim, vocab)
        out.append(Model(family, model, kind, *dims, **fields))
    return tuple(out)


def _patch(hidden: int, size: int, channels: int = 3) -> tuple:
    """A patch embedding (a size x size convolution of that stride) as a GEMM over
    im2col patches: N = hidden, K = channels x size x size."""
    return (("patch_embed", hidden, channels * size * size),)


def _sam_neck(hidden: int) -> tuple:
    """SAM's image-encoder neck: a 1x1 then a 3x3 convolution to 256 channels."""
    return (("neck.conv1", 256, hidden), ("neck.conv2", 256, 9 * 256))


def _whisper_convs(d_model: int, mels: int) -> tuple:
    """Whisper's encoder stem: two kernel-3 convolutions, mel bins -> d_model -> d_model."""
    return (("conv1", d_model, 3 * mels), ("conv2", d_model, 3 * d_model))


def _wav2vec2(hidden: int) -> tuple:
    """wav2vec 2.0's 512-channel feature encoder (kernels 10 over the waveform, then 3
    and 2) and its projection into the transformer."""
    return (
        ("feature_extractor.conv0", 512, 10),
        ("feature_extractor.conv1", 512, 3 * 512),
        ("feature_extractor.conv5", 512, 2 * 512),
        ("feature_projection", hidden, 512),
    )


def _unet_extra(attention_widths, time_dim=1280, base=320, added=0) -> tuple:
    """A Stable Diffusion UNet's linears besides its transformer blocks' attention and FF:
    the timestep MLP, the ResNets' time-embedding projections (levels 320, 640, 1280),
    the transformer levels' proj_in/proj_out, and SDXL's added-condition MLP."""
    out = [
        ("time_embedding.linear_1", time_dim, base),
        ("time_embedding.linear_2", time_dim, time_dim),
    ]
    out += [(f"time_emb_proj@{c}", c, time_dim) for c in (base, 2 * base, 4 * base)]
    out += [(f"{p}@{c}", c, c) for c in attention_widths for p in ("proj_in", "proj_out")]
    if added:
        out += [("add_embedding.linear_1", time_dim, added)]
    return tuple(out)


def _mmdit(hidden: int) -> tuple:
    """SD3's MMDiT besides its blocks: 2x2 patches of 16 latent channels, the T5 context
    (4096) and pooled CLIP text (2048) embedders, adaLN-Zero (6 x hidden), the output."""
    return (
        ("pos_embed.proj", hidden, 16 * 2 * 2),
        ("context_embedder", hidden, 4096),
        ("timestep_embedder.linear_1", hidden, 256),
        ("text_embedder.linear_1", hidden, 2048),
        ("time_text_embed.linear_2", hidden, hidden),
        ("norm1.linear", 6 * hidden, hidden),
        ("norm_out.linear", 2 * hidden, hidden),
        ("proj_out", 2 * 2 * 16, hidden),
    )


#: DiT-XL/2: 2x2 patches of 4 latent channels, adaLN-Zero, 8 output channels (sigma learned)
_DIT_XL_2 = (
    ("x_embedder", 1152, 4 * 2 * 2),
    ("t_embedder.mlp.0", 1152, 256),
    ("t_embedder.mlp.2", 1152, 1152),
    ("adaLN_modulation", 6 * 1152, 1152),
    ("final_layer.adaLN_modulation", 2 * 1152, 1152),
    ("final_layer.linear", 2 * 2 * 8, 1152),
)
#: PixArt-alpha: T5-XXL captions projected to 1152, adaLN-single, DiT-XL/2's patches
_PIXART = (
    ("pos_embed.proj", 1152, 4 * 2 * 2),
    ("caption_projection.linear_1", 1152, 4096),
    ("caption_projection.linear_2", 1152, 1152),
    ("timestep_embedder.linear_1", 1152, 256),
    ("adaln_single.linear", 6 * 1152, 1152),
    ("proj_out", 2 * 2 * 8, 1152),
)
#: FLUX.1 as its reference code holds it: 64 = 16 latent channels x 2 x 2; single-stream
#: blocks' linear1 is qkv + MLP in (3 x 3072 + 12288), linear2 attention + MLP out
_FLUX = (
    ("img_in", 3072, 64),
    ("txt_in", 3072, 4096),
    ("time_in.in_layer", 3072, 256),
    ("vector_in.in_layer", 3072, 768),
    ("time_in.out_layer", 3072, 3072),
    ("double_blocks.mod", 6 * 3072, 3072),
    ("single_blocks.linear1", 3 * 3072 + 12288, 3072),
    ("single_blocks.linear2", 3072, 3072 + 12288),
    ("single_blocks.modulation", 3 * 3072, 3072),
    ("final_layer.adaLN_modulation", 2 * 3072, 3072),
    ("final_layer.linear", 64, 3072),
)

# The published configurations, a family per call. A row: model id, hidden,
# intermediate, heads, kv_heads, head_dim, vocab (0: the default) as its ``source`` gives
# them (config.json's hidden_size, intermediate_size, num_attention_heads,
# num_key_value_heads, head_dim, vocab_size, or their names in other architectures:
# d_model, d_ff, n_embd, ffn_dim, encoder_ffn_dim, ...).
MODELS = (
    # --- decoder LLMs, dense -----------------------------------------------------------------
    *_family(
        "llama2",
        "decoder-dense",
        [
            ("meta-llama/Llama-2-7b-hf", 4096, 11008, 32, 0, 0, 32000),
            ("meta-llama/Llama-2-13b-hf", 5120, 13824, 40, 0, 0, 32000),
        ],
        gated=True,
    ),
    *_family(
        "llama3",
        "decoder-dense",
        [
            ("meta-llama/Llama-3.2-1B", 2048, 8192, 32, 8, 64, 128256),
            ("meta-llama/Llama-3.2-3B", 3072, 8192, 24, 8, 0, 128256),
            ("meta-llama/Llama-3.1-8B", 4096, 14336, 32, 8, 0, 128256),
            ("meta-llama/Llama-3.1-70B", 8192, 28672, 64, 8, 0, 128256),
        ],
        gated=True,
    ),
    # Nemo: 32 heads of 128 (4096), narrower than its 5120 residual
    *_family(
        "mistral",
        "decoder-dense",
        [
            ("mistralai/Mistral-7B-v0.1", 4096, 14336, 32, 8, 0, 32000),
            ("mistralai/Mistral-Nemo-Base-2407", 5120, 14336, 32, 8, 128, 131072),
        ],
        gated=True,
    ),
    *_family(
        "qwen2",
        "decoder-dense",
        [
            ("Qwen/Qwen2.5-0.5B", 896, 4864, 14, 2, 0, 151936),
            ("Qwen/Qwen2.5-7B", 3584, 18944, 28, 4, 0, 152064),
            ("Qwen/Qwen2.5-14B", 5120, 13824, 40, 8, 0, 152064),
            ("Qwen/Qwen2.5-72B", 8192, 29568, 64, 8, 0, 152064),
        ],
        gated=True,
    ),
    *_family(
        "qwen3",
        "decoder-dense",
        [
            ("Qwen/Qwen3-4B", 2560, 9728, 32, 8, 128, 151936),
            ("Qwen/Qwen3-8B", 4096, 12288, 32, 8, 128, 151936),
            ("Qwen/Qwen3-32B", 5120, 25600, 64, 8, 128, 151936),
        ],
        gated=True,
    ),
    # Gemma: GeGLU MLPs, heads of 256 on most sizes
    *_family(
        "gemma2",
        "decoder-dense",
        [
            ("google/gemma-2-2b", 2304, 9216, 8, 4, 256, 256000),
            ("google/gemma-2-9b", 3584, 14336, 16, 8, 256, 256000),
            ("google/gemma-2-27b", 4608, 36864, 32, 16, 128, 256000),
        ],
        gated=True,
    ),
    # the 12B and 27B are multimodal: their language model's text_config
    *_family(
        "gemma3",
        "decoder-dense",
        [
            ("google/gemma-3-1b-pt", 1152, 6912, 4, 1, 256, 262144),
            ("google/gemma-3-12b-pt", 3840, 15360, 16, 8, 256, 262208),
            ("google/gemma-3-27b-pt", 5376, 21504, 32, 16, 128, 262208),
        ],
        gated=True,
    ),
    # Phi-3 and Phi-4 checkpoints hold qkv_proj and gate_up_proj fused
    *_family(
        "phi3",
        "decoder-dense",
        [
            ("microsoft/Phi-3-mini-4k-instruct", 3072, 8192, 32, 0, 0, 32064),
            ("microsoft/Phi-3-medium-4k-instruct", 5120, 17920, 40, 10, 0, 32064),
            ("microsoft/phi-4", 5120, 17920, 40, 10, 0, 100352),
        ],
        fused_qkv=True,
        gated=True,
        fused_gate_up=True,
    ),
    *_family("phi2", "decoder-dense", [("microsoft/phi-2", 2560, 10240, 32, 0, 0, 51200)]),
    # Falcon-7B: multi-query attention (one K/V head) under 71 query heads of 64
    *_family(
        "falcon",
        "decoder-dense",
        [
            ("tiiuae/falcon-7b", 4544, 18176, 71, 1, 64, 65024),
            ("tiiuae/falcon-40b", 8192, 32768, 128, 8, 64, 65024),
        ],
        fused_qkv=True,
    ),
    # GPT-2's Conv1D stores W as (K, N): its own code runs these as tt
    *_family(
        "gpt2",
        "decoder-dense",
        [
            ("openai-community/gpt2", 768, 3072, 12, 0, 0, 50257),
            ("openai-community/gpt2-medium", 1024, 4096, 16, 0, 0, 50257),
            ("openai-community/gpt2-xl", 1600, 6400, 25, 0, 0, 50257),
        ],
        fused_qkv=True,
    ),
    *_family("gpt-j", "decoder-dense", [("EleutherAI/gpt-j-6b", 4096, 16384, 16, 0, 0, 50400)]),
    *_family(
        "gpt-neox",
        "decoder-dense",
        [
            ("EleutherAI/pythia-1b", 2048, 8192, 8, 0, 0, 50304),
            ("EleutherAI/pythia-6.9b", 4096, 16384, 32, 0, 0, 50432),
            ("EleutherAI/gpt-neox-20b", 6144, 24576, 64, 0, 0, 50432),
        ],
        fused_qkv=True,
    ),
    *_family(
        "opt",
        "decoder-dense",
        [
            ("facebook/opt-125m", 768, 3072, 12, 0, 0, 50272),
            ("facebook/opt-6.7b", 4096, 16384, 32, 0, 0, 50272),
            ("facebook/opt-66b", 9216, 36864, 72, 0, 0, 50272),
        ],
    ),
    *_family(
        "bloom",
        "decoder-dense",
        [
            ("bigscience/bloom-560m", 1024, 4096, 16, 0, 0, 250880),
            ("bigscience/bloom-7b1", 4096, 16384, 32, 0, 0, 250880),
        ],
        fused_qkv=True,
    ),
    *_family(
        "starcoder2",
        "decoder-dense",
        [
            ("bigcode/starcoder2-3b", 3072, 12288, 24, 2, 0, 49152),
            ("bigcode/starcoder2-15b", 6144, 24576, 48, 4, 0, 49152),
        ],
    ),
    *_family(
        "olmo2",
        "decoder-dense",
        [
            ("allenai/OLMo-2-1124-7B", 4096, 11008, 32, 0, 0, 100352),
            ("allenai/OLMo-2-1124-13B", 5120, 13824, 40, 0, 0, 100352),
        ],
        gated=True,
    ),
    # --- decoder LLMs, mixture of experts (intermediate: the dense layers' MLP, if any) -----
    *_family(
        "mixtral",
        "decoder-moe",
        [
            (
                "mistralai/Mixtral-8x7B-v0.1",
                4096,
                0,
                32,
                8,
                0,
                32000,
                {"expert_intermediate": 14336},
            ),
            (
                "mistralai/Mixtral-8x22B-Instruct-v0.1",
                *(6144, 0, 48, 8, 0, 32768),
                {"expert_intermediate": 16384},
            ),
        ],
        gated=True,
        experts=8,
    ),
    # MLA attention (head_dim: qk_nope_head_dim); the first layers' dense MLP; the shared
    # experts run as one MLP of n_shared_experts x moe_intermediate_size
    *_family(
        "deepseek",
        "decoder-moe",
        [
            (
                "deepseek-ai/DeepSeek-V2-Lite",
                *(2048, 10944, 16, 0, 128, 102400),
                {"experts": 64, "expert_intermediate": 1408, "shared_intermediate": 2 * 1408},
            ),
            (
                "deepseek-ai/DeepSeek-V3",
                *(7168, 18432, 128, 0, 128, 129280),
                {
                    "experts": 256,
                    "expert_intermediate": 2048,
                    "shared_intermediate": 2048,
                    "q_lora_rank": 1536,
                },
            ),
        ],
        gated=True,
        kv_lora_rank=512,
        rope_head_dim=64,
        v_head_dim=128,
    ),
    # Qwen1.5-MoE: a shared expert scaled by a (1, hidden) sigmoid gate
    *_family(
        "qwen-moe",
        "decoder-moe",
        [
            (
                "Qwen/Qwen1.5-MoE-A2.7B",
                *(2048, 0, 16, 0, 0, 151936),
                {
                    "experts": 60,
                    "expert_intermediate": 1408,
                    "shared_intermediate": 5632,
                    "shared_gate": True,
                },
            ),
            (
                "Qwen/Qwen3-30B-A3B",
                *(2048, 0, 32, 4, 128, 151936),
                {"experts": 128, "expert_intermediate": 768},
            ),
        ],
        gated=True,
    ),
    *_family(
        "olmoe",
        "decoder-moe",
        [("allenai/OLMoE-1B-7B-0924", 2048, 0, 16, 0, 0, 50304)],
        gated=True,
        experts=64,
        expert_intermediate=1024,
    ),
    # d_model, n_heads, attn_config.kv_n_heads, ffn_config (16 experts of 10752), fused Wqkv
    *_family(
        "dbrx",
        "decoder-moe",
        [("databricks/dbrx-base", 6144, 0, 48, 8, 0, 100352)],
        fused_qkv=True,
        gated=True,
        experts=16,
        expert_intermediate=10752,
    ),
    # 64 heads of 64 (4096) over a 2880 residual; the experts' gate_up_proj fused
    *_family(
        "gpt-oss",
        "decoder-moe",
        [
            ("openai/gpt-oss-20b", 2880, 0, 64, 8, 64, 201088, {"experts": 32}),
            ("openai/gpt-oss-120b", 2880, 0, 64, 8, 64, 201088, {"experts": 128}),
        ],
        gated=True,
        fused_gate_up=True,
        expert_intermediate=2880,
    ),
    # --- encoders (vocab: the masked-LM head's decoder) ---------------------------------------
    *_family(
        "bert",
        "encoder",
        [
            ("google-bert/bert-base-uncased", 768, 3072, 12, 0, 0, 30522),
            ("google-bert/bert-large-uncased", 1024, 4096, 16, 0, 0, 30522),
        ],
    ),
    *_family(
        "roberta",
        "encoder",
        [
            ("FacebookAI/roberta-base", 768, 3072, 12, 0, 0, 50265),
            ("FacebookAI/xlm-roberta-large", 1024, 4096, 16, 0, 0, 250002),
        ],
    ),
    *_family(
        "deberta",
        "encoder",
        [
            ("microsoft/deberta-v3-base", 768, 3072, 12, 0, 0, 128100),
            ("microsoft/deberta-v3-large", 1024, 4096, 16, 0, 0, 128100),
        ],
    ),
    # fused Wqkv; GeGLU through one Wi of 2 x intermediate
    *_family(
        "modernbert",
        "encoder",
        [
            ("answerdotai/ModernBERT-base", 768, 1152, 12, 0, 0, 50368),
            ("answerdotai/ModernBERT-large", 1024, 2624, 16, 0, 0, 50368),
        ],
        fused_qkv=True,
        gated=True,
        fused_gate_up=True,
    ),
    # the encoders (d_model, d_ff, num_heads, d_kv); v1.1 and FLAN-T5 use gated GELU.
    # T5-XXL's encoder is the text encoder of SD3, FLUX.1 and PixArt
    *_family(
        "t5",
        "encoder",
        [
            ("google-t5/t5-base", 768, 3072, 12, 0, 64, 0),
            ("google/flan-t5-xl", 2048, 5120, 32, 0, 64, 0, {"gated": True}),
            ("google/t5-v1_1-xxl", 4096, 10240, 64, 0, 64, 0, {"gated": True}),
        ],
    ),
    # --- vision transformers (vocab: classes of the classifier head) --------------------------
    *_family(
        "vit",
        "vit",
        [
            ("google/vit-base-patch16-224", 768, 3072, 12, 0, 0, 1000, {"extra": _patch(768, 16)}),
            (
                "google/vit-large-patch16-224",
                1024,
                4096,
                16,
                0,
                0,
                1000,
                {"extra": _patch(1024, 16)},
            ),
            (
                "google/vit-huge-patch14-224-in21k",
                1280,
                5120,
                16,
                0,
                0,
                0,
                {"extra": _patch(1280, 14)},
            ),
        ],
    ),
    # CLIP image towers (vision_config) and their projection into the joint embedding
    *_family(
        "clip",
        "vit",
        [
            (
                "openai/clip-vit-base-patch32",
                *(768, 3072, 12, 0, 0, 0),
                {"extra": _patch(768, 32) + (("visual_projection", 512, 768),)},
            ),
            (
                "openai/clip-vit-large-patch14",
                *(1024, 4096, 16, 0, 0, 0),
                {"extra": _patch(1024, 14) + (("visual_projection", 768, 1024),)},
            ),
            (
                "laion/CLIP-ViT-bigG-14-laion2B-39B-b160k",
                *(1664, 8192, 16, 0, 0, 0),
                {"extra": _patch(1664, 14) + (("visual_projection", 1280, 1664),)},
            ),
        ],
    ),
    # giant: a SwiGLU FFN of int(int(1536 x 4) x 2 / 3) rounded up to 8 = 4096, weights_in
    # holding both halves
    *_family(
        "dinov2",
        "vit",
        [
            ("facebook/dinov2-base", 768, 3072, 12, 0, 0, 0, {"extra": _patch(768, 14)}),
            ("facebook/dinov2-large", 1024, 4096, 16, 0, 0, 0, {"extra": _patch(1024, 14)}),
            (
                "facebook/dinov2-giant",
                *(1536, 4096, 24, 0, 0, 0),
                {"extra": _patch(1536, 14), "gated": True, "fused_gate_up": True},
            ),
        ],
    ),
    # SAM's image encoders (vision_config): fused qkv
    *_family(
        "sam",
        "vit",
        [
            (
                "facebook/sam-vit-base",
                *(768, 3072, 12, 0, 0, 0),
                {"extra": _patch(768, 16) + _sam_neck(768)},
            ),
            (
                "facebook/sam-vit-huge",
                *(1280, 5120, 16, 0, 0, 0),
                {"extra": _patch(1280, 16) + _sam_neck(1280)},
            ),
        ],
        fused_qkv=True,
    ),
    *_family(
        "siglip",
        "vit",
        [
            ("google/siglip-base-patch16-224", 768, 3072, 12, 0, 0, 0, {"extra": _patch(768, 16)}),
            (
                "google/siglip-so400m-patch14-384",
                1152,
                4304,
                16,
                0,
                0,
                0,
                {"extra": _patch(1152, 14)},
            ),
        ],
    ),
    # --- speech -------------------------------------------------------------------------------
    # Whisper: the decoder's cross-attention reads the encoder's d_model-wide states
    *_family(
        "whisper",
        "speech",
        [
            (
                "openai/whisper-base",
                *(512, 2048, 8, 0, 0, 51865),
                {"cross_dim": 512, "extra": _whisper_convs(512, 80)},
            ),
            (
                "openai/whisper-large-v3",
                *(1280, 5120, 20, 0, 0, 51866),
                {"cross_dim": 1280, "extra": _whisper_convs(1280, 128)},
            ),
        ],
    ),
    # wav2vec 2.0 with its CTC head over 32 characters
    *_family(
        "wav2vec2",
        "speech",
        [
            ("facebook/wav2vec2-base-960h", 768, 3072, 12, 0, 0, 32, {"extra": _wav2vec2(768)}),
            (
                "facebook/wav2vec2-large-960h-lv60-self",
                *(1024, 4096, 16, 0, 0, 32),
                {"extra": _wav2vec2(1024)},
            ),
        ],
    ),
    # --- diffusion UNets: transformer levels with GEGLU FF (4x), cross-attention to text ------
    # SD 1.5: 8 heads at every level; SD 2.x: heads of 64 (its attention_head_dim [5, 10,
    # 20] counts heads)
    *_family(
        "sd-unet",
        "diffusion-unet",
        [
            (
                "stable-diffusion-v1-5/stable-diffusion-v1-5",
                320,
                1280,
                8,
                0,
                0,
                0,
                {"cross_dim": 768},
            ),
            ("stabilityai/stable-diffusion-2-1", 320, 1280, 0, 0, 64, 0, {"cross_dim": 1024}),
        ],
        path="unet/config.json",
        gated=True,
        fused_gate_up=True,
        widths=(320, 640, 1280),
        extra=_unet_extra((320, 640, 1280)),
    ),
    # SDXL: transformers at 640 and 1280 only; added condition = 6 time ids x 256 + pooled
    # CLIP-bigG text (1280)
    *_family(
        "sdxl-unet",
        "diffusion-unet",
        [("stabilityai/stable-diffusion-xl-base-1.0", 640, 2560, 0, 0, 64, 0)],
        path="unet/config.json",
        gated=True,
        fused_gate_up=True,
        cross_dim=2048,
        widths=(640, 1280),
        extra=_unet_extra((640, 1280), added=6 * 256 + 1280),
    ),
    # --- diffusion transformers (MLP 4x, GELU) ----------------------------------------------
    *_family(
        "dit",
        "dit",
        [("facebook/DiT-XL-2-256", 1152, 4608, 16, 0, 0, 0, {"extra": _DIT_XL_2})],
        path="transformer/config.json",
    ),
    *_family(
        "pixart",
        "dit",
        [("PixArt-alpha/PixArt-XL-2-1024-MS", 1152, 4608, 16, 0, 0, 0, {"extra": _PIXART})],
        path="transformer/config.json",
        cross_dim=1152,
    ),
    # double-stream blocks' qkv fused (img and txt streams alike)
    *_family(
        "flux",
        "dit",
        [("black-forest-labs/FLUX.1-dev", 3072, 12288, 24, 0, 0, 0, {"extra": _FLUX})],
        path="transformer/config.json",
        fused_qkv=True,
    ),
    # heads of 64 (attention_head_dim) x num_attention_heads
    *_family(
        "sd3-mmdit",
        "dit",
        [
            (
                "stabilityai/stable-diffusion-3-medium-diffusers",
                *(1536, 6144, 24, 0, 0, 0),
                {"extra": _mmdit(1536)},
            ),
            (
                "stabilityai/stable-diffusion-3.5-large",
                *(2432, 9728, 38, 0, 0, 0),
                {"extra": _mmdit(2432)},
            ),
        ],
        path="transformer/config.json",
    ),
)

#: the held-out families: about a third of them, at least one of every kind, chosen by
#: hand (not drawn) so that the split reads in one place and never moves with a new model
HELDOUT = (
    "falcon",
    "gemma2",
    "gpt-j",
    "phi3",
    "starcoder2",
    "deepseek",
    "olmoe",
    "modernbert",
    "t5",
    "dinov2",
    "sam",
    "whisper",
    "sdxl-unet",
    "flux",
)


def part(family: str) -> str:
    """The part a family belongs to.

    >>> part("whisper"), part("llama3")
    ('heldout', 'fit')
    """
    return "heldout" if family in HELDOUT else "fit"


def families() -> dict:
    """Family -> its models, in :data:`MODELS` order."""
    out = collections.defaultdict(list)
    for m in MODELS:
        out[m.family].append(m)
    return dict(out)


def _level(model: Model, width: int) -> Model:
    """One transformer level of a UNet: the model's block scaled to ``width``."""
    heads = width // model.head_dim if model.head_dim else model.heads
    return dataclasses.replace(
        model,
        hidden=width,
        intermediate=model.intermediate * width // model.hidden,
        heads=heads,
        head_dim=width // heads,
        widths=(),
        extra=(),
        vocab=0,
    )


def _mlp(prefix: str, width: int, hidden: int, gated: bool, fused: bool) -> list:
    """An MLP of ``width`` on a ``hidden`` residual: fc1/fc2, or gate and up (one GEMM of
    twice the width when the checkpoint fuses them, since that is what runs) then down."""
    if not gated:
        return [
            Projection(f"{prefix}fc1", width, hidden),
            Projection(f"{prefix}fc2", hidden, width),
        ]
    ins = (
        [Projection(f"{prefix}gate_up", 2 * width, hidden)]
        if fused
        else [Projection(f"{prefix}gate", width, hidden), Projection(f"{prefix}up", width, hidden)]
    )
    return ins + [Projection(f"{prefix}down", hidden, width)]


def _block(m: Model) -> list:
    """The linears of one transformer block of width ``m.hidden``."""
    h = m.hidden
    out = []
    if m.kv_lora_rank:  # multi-head latent attention (DeepSeek-V2/V3)
        qk = m.head_dim + m.rope_head_dim
        if m.q_lora_rank:
            out += [
                Projection("q_a", m.q_lora_rank, h),
                Projection("q_b", m.heads * qk, m.q_lora_rank),
            ]
        else:
            out += [Projection("q", m.heads * qk, h)]
        out += [
            Projection("kv_a", m.kv_lora_rank + m.rope_head_dim, h),
            Projection("kv_b", m.heads * (m.head_dim + m.v_head_dim), m.kv_lora_rank),
            Projection("o", h, m.heads * m.v_head_dim),
        ]
        q_dim = m.heads * m.v_head_dim
    else:
        q_dim = m.heads * m.head_width
        kv_dim = (m.kv_heads or m.heads) * m.head_width
        if m.fused_qkv:
            out += [Projection("qkv", q_dim + 2 * kv_dim, h)]
        else:
            out += [
                Projection("q", q_dim, h),
                Projection("k", kv_dim, h),
                Projection("v", kv_dim, h),
            ]
        out += [Projection("o", h, q_dim)]
    if m.cross_dim:
        out += [
            Projection("xq", q_dim, h),
            Projection("xk", q_dim, m.cross_dim),
            Projection("xv", q_dim, m.cross_dim),
            Projection("xo", h, q_dim),
        ]
    if m.intermediate:
        out += _mlp("", m.intermediate, h, m.gated, m.fused_gate_up)
    if m.experts:
        out += [Projection("router", m.experts, h)]
        out += _mlp("expert_", m.expert_intermediate, h, True, m.fused_gate_up)
        if m.shared_intermediate:
            out += _mlp("shared_", m.shared_intermediate, h, True, m.fused_gate_up)
        if m.shared_gate:
            out += [Projection("shared_expert_gate", 1, h)]
    return out


def projections(model: Model) -> list:
    """The model's linear layers as ``tn`` GEMMs, (N, K) each: ``y = x @ W.T``.

    Names follow the usual checkpoint roles: ``q``/``k``/``v`` or ``qkv``, ``o``,
    ``gate``/``up`` or ``gate_up`` and ``down`` (gated MLPs), ``fc1``/``fc2`` (plain
    MLPs), ``router`` and ``expert_*``/``shared_*`` (MoE), ``q_a``/``q_b``/``kv_a``/
    ``kv_b`` (MLA), ``xq``/``xk``/``xv``/``xo`` (cross-attention), ``lm_head`` or
    ``classifier``, then the model's ``extra`` linears. A UNet's block linears carry
    ``@width``. Each name appears once per model.

    Args:
        model: a row of :data:`MODELS`.

    Returns:
        A list of :class:`Projection`.

    >>> m = next(m for m in MODELS if m.model == "meta-llama/Llama-3.1-8B")
    >>> [(p.name, p.n, p.k) for p in projections(m)]  # doctest: +NORMALIZE_WHITESPACE
    [('q', 4096, 4096), ('k', 1024, 4096), ('v', 1024, 4096), ('o', 4096, 4096),
     ('gate', 14336, 4096), ('up', 14336, 4096), ('down', 4096, 14336),
     ('lm_head', 128256, 4096)]
    """
    if model.widths:
        out = [
            Projection(f"{p.name}@{w}", p.n, p.k)
            for w in model.widths
            for p in _block(_level(model, w))
        ]
    else:
        out = _block(model)
    if model.vocab:
        head = "classifier" if model.kind == "vit" else "lm_head"
        out.append(Projection(head, model.vocab, model.hidden))
    out += [Projection(name, n, k) for name, n, k in model.extra]
    return out


def attention_dims(model: Model) -> list:
    """(heads, query/key head width, value head width) of each attention width.

    >>> attention_dims(next(m for m in MODELS if m.model == "deepseek-ai/DeepSeek-V3"))
    [(128, 192, 128)]
    """
    if model.widths:
        return [attention_dims(_level(model, w))[0] for w in model.widths]
    if model.kv_lora_rank:
        return [(model.heads, model.head_dim + model.rope_head_dim, model.v_head_dim)]
    return [(model.heads, model.head_width, model.head_width)]


def _per_rank(count: int) -> int:
    """``count`` (heads, experts) split evenly-ish over the fewest ranks that leave at most
    :data:`MAX_L` on each (tensor or expert parallelism), rounded up."""
    ranks = -(-count // MAX_L)
    return -(-count // ranks)


def draw_m(rng: random.Random, hi: int = M_MAX) -> int:
    """A token count log-uniform in [1, hi]; :data:`ODD_SHARE` of even draws made odd.

    >>> rng = random.Random(0)
    >>> all(1 <= draw_m(rng) <= M_MAX for _ in range(1000))
    True
    """
    m = max(1, min(hi, round(math.exp(rng.uniform(0.0, math.log(hi))))))
    if m % 2 == 0 and rng.random() < ODD_SHARE:
        m = m + 1 if m < hi else m - 1
    return m


def _family_rows(family: str, models: list) -> list:
    """The rows of one family, deduplicated on (layout, batch, m, n, k)."""
    rows, seen = [], set()

    def add(model, projection, layout, batch, m, n, k):
        key = (layout, batch, m, n, k)
        if key not in seen:
            seen.add(key)
            rows.append(
                Shape(
                    CORPUS_VERSION,
                    family,
                    model.model,
                    model.kind,
                    model.source,
                    projection,
                    part(family),
                    layout,
                    batch,
                    m,
                    n,
                    k,
                )
            )

    # seeds are strings (hashed by sha512 in random.seed, stable across processes)
    for model in models:
        for p in projections(model):
            rng = random.Random(f"{SEED}/{model.model}/{p.name}")
            for _ in range(M_PER_PROJECTION):
                add(model, p.name, "tn", 1, draw_m(rng), p.n, p.k)
    rng = random.Random(f"{SEED}/{family}/layouts")
    pool = [(model, p) for model in models for p in projections(model)]
    for layout in LAYOUTS[1:]:
        for _ in range(OTHER_LAYOUT_ROWS):
            model, p = rng.choice(pool)
            add(model, p.name, layout, 1, draw_m(rng), p.n, p.k)
    # per-head attention of one GPU's heads, L = heads x sequences <= MAX_L:
    # scores Q K^T is (L, M, kv_len, qk) in tn; context P V is (L, M, v, kv_len) in tt
    rng = random.Random(f"{SEED}/{family}/batched")
    for _ in range(BATCHED_ROWS):
        model = rng.choice(models)
        heads, qk, v = rng.choice(attention_dims(model))
        heads = _per_rank(heads)
        batch = heads * rng.choice([b for b in (1, 2, 4, 8) if heads * b <= MAX_L])
        m = draw_m(rng, BATCHED_M_MAX)
        kv_len = round(math.exp(rng.uniform(math.log(m), math.log(BATCHED_M_MAX))))
        add(model, "attn_scores", "tn", batch, m, kv_len, qk)
        add(model, "attn_context", "tt", batch, m, v, kv_len)
    # MoE experts as one batched GEMM over a rank's experts at a fixed capacity
    moe = [model for model in models if model.experts]
    for _ in range(BATCHED_ROWS if moe else 0):
        model = rng.choice(moe)
        p = rng.choice([p for p in projections(model) if p.name.startswith("expert_")])
        add(model, p.name, "tn", _per_rank(model.experts), draw_m(rng, BATCHED_M_MAX), p.n, p.k)
    return rows


def rows() -> list:
    """The corpus, generated: every family's rows, in :data:`MODELS` order."""
    return [s for fam, models in families().items() for s in _family_rows(fam, models)]


def render(shapes) -> str:
    """The CSV text of ``shapes`` (header first, ``\\n`` line ends)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for s in shapes:
        w.writerow([getattr(s, c) for c in COLUMNS])
    return buf.getvalue()


def load(part: str | None = None, layout: str | None = None, path: str = CSV_PATH) -> list:
    """The corpus as written in ``path``, optionally one part and one layout.

    Args:
        part: ``"fit"`` or ``"heldout"``; None: both.
        layout: ``"tn"``, ``"tt"`` or ``"nn"``; None: all.
        path: the CSV, plain or ``.csv.gz`` (default: this version's checked-in file;
            where it is absent, the rows :func:`rows` generates, which it holds).

    Returns:
        A list of :class:`Shape`, in file order.

    Raises:
        ValueError: an unknown part or layout.

    >>> {s.layout for s in load("heldout", "tn")}
    {'tn'}
    """
    if part is not None and part not in PARTS:
        raise ValueError(f"unknown part {part!r}; choose from {', '.join(PARTS)}")
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    if path == CSV_PATH and not os.path.exists(path):
        shapes = rows()  # no data folder (an sdist): what the checked-in file holds
    else:
        shapes = [Shape.from_row(r) for r in csv.DictReader(datafiles.open_text(path))]
    return [
        s
        for s in shapes
        if (part is None or s.part == part) and (layout is None or s.layout == layout)
    ]


def summary(shapes) -> str:
    """Rows per part, then per part and kind, and per part and layout (batched apart)."""
    lines = [f"corpus v{CORPUS_VERSION}: {len(shapes)} rows"]
    for p in PARTS:
        mine = [s for s in shapes if s.part == p]
        fams = sorted({s.family for s in mine})
        lines.append(f"{p}: {len(mine)} rows, {len(fams)} families: {', '.join(fams)}")
        kinds = collections.Counter(s.kind for s in mine)
        lines += [f"  {p:8s} kind   {k:15s} {kinds[k]:5d}" for k in KINDS if kinds[k]]
        lays = collections.Counter((s.layout, "batched" if s.batch > 1 else "single") for s in mine)
        lines += [f"  {p:8s} layout {a} {b:8s} {n:5d}" for (a, b), n in sorted(lays.items())]
    return "\n".join(lines)


def main(argv=None) -> int:
    """The command line (module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", action="store_true", help="regenerate the CSV")
    what.add_argument("--check", action="store_true", help="exit 1 if the CSV is stale")
    what.add_argument("--summary", action="store_true", help="rows per part, kind, layout")
    ap.add_argument("--csv", default=CSV_PATH, help="the file (default: %(default)s)")
    args = ap.parse_args(argv)
    text = render(rows())
    if args.write:
        datafiles.write_text(args.csv, text)  # gzip'd where the name ends in .gz
        print(f"wrote {args.csv}: {text.count(chr(10)) - 1} rows")
        return 0
    if args.check:
        try:
            stale = datafiles.read_bytes(args.csv).decode("utf-8") != text
        except FileNotFoundError:
            stale = True
        if stale:
            print(f"{args.csv} is stale: run python heuristics/corpus.py --write", file=sys.stderr)
            return 1
        print(f"{args.csv} is up to date")
        return 0
    print(summary(load(path=args.csv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
