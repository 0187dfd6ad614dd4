"""shiftstack: shift-and-stack searches for faint moving objects, from Python.

    import numpy as np, shiftstack
    stack = shiftstack.Stack(science, variance, mask, epochs=mjd, psf_sigma=1.4)
    results = shiftstack.search(stack, lh_level=7, generator_config={...})
    table = results.to_table()          # an astropy Table with the command line's columns

The C++ core does the work with the GIL released; Ctrl-C stops a search at its next tile or
stage boundary (KeyboardInterrupt), and a CancelToken stops it from another thread. Errors of
the core arrive as shiftstack.Error with the core's message; bad arrays raise ValueError.
"""

from . import _shiftstack as _core


def _check_numpy_abi():
    """pybind11 before 2.12 reads numpy 1's array structures: refuse numpy 2 rather than
    misread arrays. numpy's version is read from its version.py, without importing numpy (or
    importlib.metadata), to keep `import shiftstack` fast."""
    if tuple(_core._pybind11_version) >= (2, 12, 0):
        return
    import importlib.util
    import os
    import re

    spec = importlib.util.find_spec("numpy")
    if spec is None or not spec.origin:
        return
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            found = re.search(r"^(?:full_)?version(?:: str)? = ['\"](\d+)\.", f.read(), re.M)
    except OSError:
        return
    if found and int(found[1]) >= 2:
        built = ".".join(map(str, _core._pybind11_version))
        raise ImportError(f"shiftstack was built with pybind11 {built}, which does not support numpy 2 "
                          f"(found in {os.path.dirname(spec.origin)}): rebuild against pybind11 >= 2.12, or use numpy 1.x")


_check_numpy_abi()
from ._shiftstack import (
    Bank,
    CancelToken,
    Cancelled,
    Config,
    Error,
    Kit,
    Stack,
    __version__,
    best_engine,
    bonferroni_threshold,
    compare_digests,
    cuda_available,
    device_memory,
    device_uploads,
    encodings,
    engines,
    machine,
    release_device_cache,
    threads,
    workloads,
)
from ._results import Results, ScanResult
from ._tools import bench, validate

__all__ = [
    "Bank", "CancelToken", "Cancelled", "Config", "Error", "Kit", "Results", "ScanResult", "Stack",
    "bench", "best_engine", "bonferroni_threshold", "compare_digests", "cuda_available", "device_memory",
    "device_uploads", "encodings", "engines", "kit", "kit_config", "machine", "read_fits", "read_workunit",
    "release_device_cache", "scan", "search", "threads", "validate", "workloads", "__version__",
]


def _config(config, keys):
    """A Config from None, a Config, a dict or a YAML path, with keyword keys over it."""
    if config is None:
        base = Config()
    elif isinstance(config, Config):
        base = config
    elif isinstance(config, dict):
        base = Config(config)
    elif isinstance(config, str):
        base = Config.load(config)
    else:
        raise TypeError(f"config: expected a Config, a dict, a YAML file path or None, got {type(config).__name__}")
    return base.replace(**keys) if keys else base


def search(stack, config=None, *, engine=None, encoding=None, progress=None, cancel=None, **keys):
    """Search a Stack with the whole pipeline (the command line's `shiftstack search`).

    config: a Config, a dict of keys, a YAML file path or None (defaults); keyword arguments set
    more keys (KBMOD's names: lh_level=6, generator_config={...}, num_obs=...). engine and
    encoding ("fp32", "fp16", "int8") override the config's. progress(stage, seconds, detail) is
    called after each stage; cancel is a CancelToken. Returns Results (columns as numpy arrays,
    to_table() for astropy). The Stack keeps its likelihood maps and encoded cube for the next
    search, so later searches of it skip those stages and the GPU engines reuse their upload.
    """
    if not isinstance(stack, Stack):
        raise TypeError(f"stack: expected a shiftstack.Stack, got {type(stack).__name__}")
    cfg = _config(config, keys)
    return Results(_core._search(stack, cfg, engine, encoding, progress, cancel))


def scan(stack, bank=None, config=None, *, engine=None, encoding="fp32", region=None, alpha=0.05,
         candidate_threshold=None, top_k=0, max_candidates=None, cancel=None):
    """One engine over every trial of the bank: the digest (SPEC 4) and optionally the trials.

    bank: a Bank, or None for the bank `config` describes for this stack. engine: a name from
    shiftstack.engines() (default: the fastest available). region: (x0, y0, width, height) of the
    origins (default: the whole image). candidate_threshold: also return every trial with Z above
    it (more than max_candidates of them is an error, never a truncation); top_k: the best k
    trials per origin. This is what `shiftstack bench` times.
    """
    if not isinstance(stack, Stack):
        raise TypeError(f"stack: expected a shiftstack.Stack, got {type(stack).__name__}")
    if bank is None:
        bank = Bank.from_config(_config(config, {}), stack)
    if engine is None:
        engine = best_engine()
    x0, y0, width, height = region if region is not None else (0, 0, 0, 0)
    return ScanResult(_core._scan(stack, bank, engine, encoding, [int(x0), int(y0), int(width), int(height)],
                                  float(alpha), candidate_threshold, int(top_k), max_candidates, cancel))


def read_fits(inputs, config=None, **keys):
    """Read FITS exposures into a Stack: files, directories, glob patterns or @list files.

    The config's input keys apply (layout, science_hdu, mask_hdu, variance_hdu, flag_keys, psf_val,
    epoch_keyword, ...); exposures are sorted by epoch and keep their WCS (RA/Dec columns).
    """
    if isinstance(inputs, (str, bytes)) or hasattr(inputs, "__fspath__"):
        inputs = [inputs]
    return _core.read_fits([str(p) for p in inputs], _config(config, keys))


def read_workunit(path, config=None, **keys):
    """Read a KBMOD WorkUnit file (SCI_i, VAR_i, MSK_i, PSF_i HDUs) into a Stack."""
    return read_fits([path], config, layout="workunit", **keys)


def kit(workload="ci", seed=1, shifts="integer", **options):
    """A benchmark-kit stack (SPEC 3) with one injected source at SNR 8: a Kit with .stack,
    .bank and .truth. Workloads: ci, kbmod, dense, deep; options exposures, width, height, vx, vy,
    snr, inject, noise, masks change it. kit_config(k) is the Config that searches its bank."""
    return _core.kit(workload, seed, shifts, **options)


def kit_config(kit_stack, **keys):
    """The Config whose velocity grid is the kit's own bank (ends given exactly, so the search
    samples the same velocities) with lh_level at the bank's Bonferroni threshold, rounded up to
    0.1 (as `shiftstack write-kit` writes it); keyword keys override."""
    bank = kit_stack.bank
    vx, vy = bank.vx, bank.vy
    stack = kit_stack.stack
    trials = float(stack.shape[1]) * stack.shape[2] * len(bank)
    import math

    base = {
        "generator_config": {
            "name": "VelocityGridSearch",
            "vx_steps": len(vx), "min_vx": float(vx[0]), "max_vx": float(vx[-1]),
            "vy_steps": len(vy), "min_vy": float(vy[0]), "max_vy": float(vy[-1]),
        },
        "shift_mode": bank.shifts,
        "lh_level": math.ceil(10 * bonferroni_threshold(0.05, trials)) / 10,
    }
    base.update(keys)
    return Config(base)


def _kit_config(self, **keys):
    return kit_config(self, **keys)


_kit_config.__doc__ = kit_config.__doc__
Kit.config = _kit_config

# Public names print as shiftstack.X (the extension module is an implementation detail).
for _cls in (Bank, CancelToken, Cancelled, Config, Error, Kit, Stack):
    _cls.__module__ = "shiftstack"
del _cls
