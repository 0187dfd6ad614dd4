"""A KBMOD-style entry point: KBMOD's SearchConfiguration keys and a WorkUnit file in, a results
table that KBMOD's Results loads out.

    from shiftstack.kbmod import run_search
    table = run_search({"generator_config": {...}, "lh_level": 10.0}, "workunit.fits")
    # kbmod.results.Results(table), or Results.read_table(path) after output=path

Keys take KBMOD's defaults where shiftstack's differ (lh_level 10, cluster_eps 20,
cluster_v_scale 1 day, the EclipticCenteredSearch generator, no coadds), so a KBMOD
configuration means here what it means to KBMOD. A whole SearchConfiguration can be passed: its
keys shiftstack has no use for are dropped while they hold KBMOD's default value (listed in
table.meta["ignored_kbmod_keys"]), and refused with shiftstack.Error, naming the key and why,
when they do not.
"""

import math
import os
import tempfile

from . import Config, read_workunit, search

# KBMOD's defaults for the keys shiftstack shares but defaults differently.
KBMOD_DEFAULTS = {
    "lh_level": 10.0,
    "cluster_eps": 20.0,
    "cluster_v_scale": 1.0,
    "coadds": [],
    "generator_config": {
        "name": "EclipticCenteredSearch",
        "velocities": [92.0, 526.0, 257],
        "angles": [-math.pi / 15, math.pi / 15, 129],
        "angle_units": "radian",
        "velocity_units": "pix / d",
        "given_ecliptic": None,
    },
}

# KBMOD keys shiftstack does not use, with the KBMOD default at which dropping them changes
# nothing that shiftstack returns (results_per_pixel: shiftstack keeps every trial above
# lh_level, a superset of KBMOD's best 8 per pixel; the filters named here are off by default;
# psi/phi curves are always returned; the rest are about logging and KBMOD's own files).
IGNORED_AT_DEFAULT = {
    "results_per_pixel": 8,
    "x_pixel_buffer": None,
    "y_pixel_buffer": None,
    "cnn_filter": False,
    "cnn_model": None,
    "cnn_coadd_type": "mean",
    "cnn_stamp_radius": 49,
    "cnn_model_type": "resnet18",
    "debug": False,
    "drop_columns": [],
    "generate_psi_phi": True,
    "gpu_filter": True,
    "near_dup_thresh": 10,
    "nightly_coadds": False,
    "peak_offset_max": None,
    "pred_line_cluster": False,
    "pred_line_params": [4.0, 2, 60],
    "save_all_stamps": False,
    "save_config": True,
    "separate_col_files": ["all_stamps"],
    "track_filtered": False,
    "result_filename": None,
}


def _keys_of(config):
    """KBMOD's configuration as a dict: a dict, a SearchConfiguration (its _params), or a YAML path."""
    if config is None:
        return {}
    if isinstance(config, dict):
        return dict(config)
    if isinstance(config, (str, os.PathLike)):
        import yaml  # PyYAML, which astropy needs too

        with open(os.fspath(config)) as f:
            return dict(yaml.safe_load(f) or {})
    params = getattr(config, "_params", None)  # kbmod.configuration.SearchConfiguration
    if isinstance(params, dict):
        return dict(params)
    raise TypeError(f"config: expected a dict, a KBMOD SearchConfiguration or a YAML path, got {type(config).__name__}")


def kbmod_config(config):
    """The shiftstack Config for KBMOD's keys (KBMOD's defaults underneath) and the list of keys
    dropped because they hold KBMOD's default value and change nothing here."""
    given = _keys_of(config)
    known = set(Config().keys())
    keys, ignored = {}, []
    for key, value in given.items():
        if key not in known and key in IGNORED_AT_DEFAULT and value == IGNORED_AT_DEFAULT[key]:
            ignored.append(key)
            continue
        keys[key] = value
    merged = {k: v for k, v in KBMOD_DEFAULTS.items() if k not in keys}
    merged.update(keys)
    return Config(merged), sorted(ignored)


def _write_atomically(table, path):
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".shiftstack-", suffix=os.path.splitext(path)[1] or ".ecsv", dir=folder)
    os.close(fd)
    try:
        table.write(temporary, overwrite=True, format="ascii.ecsv" if path.endswith(".ecsv") else None)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def run_search(config, workunit, *, engine=None, output=None, cancel=None, progress=None):
    """Search a KBMOD WorkUnit file with KBMOD's configuration keys.

    config: a dict of SearchConfiguration keys, a SearchConfiguration, or a YAML file. workunit:
    the path of a WorkUnit FITS file (SCI_i, VAR_i, MSK_i, PSF_i). Returns an astropy Table with
    KBMOD's columns (x, y, vx, vy, likelihood, flux, obs_count, psi_curve, phi_curve, obs_valid,
    stamp, coadd_<type>, ...) that kbmod.results.Results accepts. output (or the config's
    result_filename): also write the table there (ECSV, or FITS by its extension), atomically,
    for Results.read_table.
    """
    keys = _keys_of(config)
    result_filename = keys.pop("result_filename", None)
    cfg, ignored = kbmod_config(keys)
    stack = read_workunit(os.fspath(workunit), cfg)
    results = search(stack, cfg, engine=engine, cancel=cancel, progress=progress)
    table = results.to_table()
    table.meta["ignored_kbmod_keys"] = ignored
    table.meta["digest"] = results.digest
    target = output if output is not None else result_filename
    if target:
        _write_atomically(table, os.fspath(target))
    return table
