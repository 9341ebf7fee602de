"""nvidia-smi readings of the GPUs (clocks, power, temperature) taken around a run.

The framework that makes the benchmark's tensors and times them (torch, else cupy) is an
adapter of ``pycutlass_rt._backends``, which ``tune()`` uses too.
"""

from __future__ import annotations

import subprocess

SMI_FIELDS = "clocks.sm,clocks.mem,power.draw,temperature.gpu"


def nvidia_smi(fields: str = SMI_FIELDS) -> dict:
    """One nvidia-smi reading per GPU: ``{"raw": csv text, "gpus": [{field: value}]}``."""
    cmd = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return {"raw": "", "error": str(e), "gpus": []}
    return {"raw": out, "gpus": parse_smi_csv(out)}


def parse_smi_csv(text: str) -> list:
    """Rows of ``nvidia-smi --format=csv`` output as dicts keyed by the header names."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split(",")]
    return [dict(zip(header, (v.strip() for v in ln.split(",")))) for ln in lines[1:]]
