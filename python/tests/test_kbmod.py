"""The KBMOD-style entry point: KBMOD's SearchConfiguration keys and a WorkUnit in, a table with
the columns and types KBMOD's Results requires out."""

import numpy as np
import pytest

import shiftstack
from shiftstack import kbmod as entry

pytest.importorskip("astropy")

# KBMOD's Results checks these columns (kbmod/results.py: required_cols).
REQUIRED = [("x", "i"), ("y", "i"), ("vx", "f"), ("vy", "f"), ("likelihood", "f"), ("flux", "f"), ("obs_count", "i")]


def kbmod_keys(ci_kit):
    """What a KBMOD user writes: a velocity grid and KBMOD's keys."""
    grid = ci_kit.config()["generator_config"]
    return {"generator_config": grid, "lh_level": 6.0, "num_obs": 10, "sigmaG_lims": [25, 75],
            "cluster_eps": 4.0, "stamp_radius": 5, "coadds": ["mean", "median"], "encode_num_bytes": -1}


def test_workunit_search_gives_a_results_table(straight_kit, workunit_file, tmp_path):
    out = tmp_path / "results.ecsv"
    table = entry.run_search(kbmod_keys(straight_kit), str(workunit_file), engine="cpu", output=str(out))
    assert len(table) >= 1
    for name, kind in REQUIRED:
        assert name in table.colnames and table[name].dtype.kind == kind, name
    assert table["psi_curve"].shape == (len(table), 32) and table["obs_valid"].dtype == bool
    assert table["coadd_mean"].shape == (len(table), 11, 11) and "stamp" in table.colnames
    best = int(np.argmax(table["likelihood"]))
    truth = straight_kit.truth
    assert (table["x"][best], table["y"][best]) == (truth["x"], truth["y"])
    # What Results.read_table does: Table.read, then the required columns.
    from astropy.table import Table

    back = Table.read(str(out))
    assert back.colnames == table.colnames and len(back) == len(table)
    np.testing.assert_array_equal(back["likelihood"], table["likelihood"])
    assert not list(tmp_path.glob(".shiftstack-*"))  # no temporary left behind
    # The same stack from memory gives the same table (the WorkUnit round trip is lossless).
    direct = shiftstack.search(straight_kit.stack, entry.kbmod_config(kbmod_keys(straight_kit))[0], engine="cpu")
    np.testing.assert_array_equal(direct["likelihood"], table["likelihood"])
    assert table.meta["digest"] == direct.digest


def test_kbmod_defaults_underneath(ci_kit):
    cfg, ignored = entry.kbmod_config({"generator_config": ci_kit.config()["generator_config"]})
    d = cfg.to_dict()
    assert d["lh_level"] == 10.0 and d["cluster_eps"] == 20.0 and d["cluster_v_scale"] == 1.0 and d["coadds"] == []
    assert ignored == []
    cfg, _ = entry.kbmod_config({})
    assert cfg["generator_config"]["name"] == "EclipticCenteredSearch"


def test_a_whole_search_configuration_is_accepted_at_kbmod_defaults(ci_kit):
    class SearchConfiguration:  # the shape of kbmod.configuration.SearchConfiguration
        def __init__(self, params):
            self._params = params

    params = dict(kbmod_keys(ci_kit))
    params.update({"results_per_pixel": 8, "gpu_filter": True, "cnn_filter": False, "debug": False,
                   "save_all_stamps": False, "track_filtered": False, "result_filename": None})
    cfg, ignored = entry.kbmod_config(SearchConfiguration(params))
    assert "results_per_pixel" in ignored and "cnn_filter" in ignored
    assert cfg["lh_level"] == 6.0
    params["results_per_pixel"] = 4  # not KBMOD's default: it would change the answer
    with pytest.raises(shiftstack.Error, match="results_per_pixel"):
        entry.kbmod_config(SearchConfiguration(params))
