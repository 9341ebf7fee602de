"""The package's logger, ``logging.getLogger("pycutlass_rt")``, and its switch.

Kernel choice logs each problem it meets for the first time: the kernel taken and where
the choice came from (the tuned cache, a table rule, the calibrated or the analytic
model), and why a tuned-cache entry was not used. ``PYCUTLASS_RT_LOG=info`` (or ``1``)
prints those records to stderr; ``debug`` adds the runners-up. The records go to the
logger either way, so an application's own logging configuration sees them too once it
enables the ``pycutlass_rt`` logger at INFO.

The library ranks every problem itself and tells the package of each new one (its
selector's observer, _select.py), which logs it here while the logger is enabled for INFO:
logging changes nothing of the choice, and costs only while it is on.
"""

from __future__ import annotations

import logging
import os

LOGGER = logging.getLogger("pycutlass_rt")
ENV = "PYCUTLASS_RT_LOG"
_LEVELS = {"1": logging.INFO, "info": logging.INFO, "debug": logging.DEBUG}


def configure(value: str | None = None) -> None:
    """Applies ``PYCUTLASS_RT_LOG`` (or ``value``): a stderr handler at its level; unset,
    empty or ``0`` leaves the logger to the application.

    Example:
        >>> configure("debug"); LOGGER.level == logging.DEBUG
        True
        >>> configure("0"); LOGGER.level == logging.NOTSET
        True
    """
    value = (os.environ.get(ENV, "") if value is None else value).strip().lower()
    for h in [h for h in LOGGER.handlers if getattr(h, "_pycutlass_rt", False)]:
        LOGGER.removeHandler(h)
    level = _LEVELS.get(value)
    if level is None:
        LOGGER.setLevel(logging.NOTSET)
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("pycutlass_rt: %(message)s"))
    handler._pycutlass_rt = True
    LOGGER.addHandler(handler)
    LOGGER.setLevel(level)


def choices_logged() -> bool:
    """Whether kernel choices are being logged (the observer then formats and logs them)."""
    return LOGGER.isEnabledFor(logging.INFO)


def problem_words(p) -> str:
    """How a log record names a canonical problem: shape, dtypes, layout, epilogue."""
    from ._abi import Epilogue
    from ._dtypes import DTYPE_NAMES
    from ._kernels import layout_word

    batch = f" x{p.batch}" if getattr(p, "batch", 1) > 1 else ""
    epi = Epilogue(p.epilogue).token
    return (
        f"{p.m}x{p.n}x{p.k}{batch} {DTYPE_NAMES.get(p.dtype_a)} -> {DTYPE_NAMES.get(p.dtype_d)} "
        f"{layout_word(p.layout_a, p.layout_b)}{'' if epi == 'linear' else ' ' + epi} "
        f"on cuda:{p.device}"
    )


def choice(problem, ranked: list) -> None:
    """Logs a new problem's kernel and why (``ranked``: [(KernelInfo, why)] best first)."""
    if not LOGGER.isEnabledFor(logging.INFO) or not ranked:
        return
    kern, why = ranked[0]
    LOGGER.info("%s: %s (%s)", problem_words(problem), kern.name, why)
    for k, w in ranked[1:4]:
        LOGGER.debug("  then %s (%s)", k.name, w)


def cache_unused(problem, why: str) -> None:
    """Logs why a tuned-cache entry for ``problem`` was not used."""
    LOGGER.info("%s: tuned cache entry not used: %s", problem_words(problem), why)


configure()
