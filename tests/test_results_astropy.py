"""The results files as a KBMOD user opens them: astropy's Table.read on the ECSV and FITS tables
(full and empty), the metadata KBMOD's Results.read_table uses (the table's WCS as KBMOD
serializes it, the epochs), the all_stamps file in KBMOD's separate-column layout, and an -o
extension shiftstack does not write.

Usage: python3 test_results_astropy.py PATH_TO_SHIFTSTACK FIXTURES_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from astropy.io import fits
from astropy.table import Table
from astropy.time import Time
from astropy.wcs import WCS

shiftstack, fixtures = sys.argv[1], sys.argv[2]
small = os.path.join(fixtures, "kbmod", "small")
demo = os.path.join(fixtures, "kbmod", "demo_config.yaml")
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAILED:", what)


def run(*args):
    return subprocess.run([shiftstack, *args], capture_output=True, text=True)


# Columns KBMOD's Results requires, with their kinds.
required = {"x": "i", "y": "i", "vx": "f", "vy": "f", "likelihood": "f", "flux": "f", "obs_count": "i"}

with tempfile.TemporaryDirectory() as work:
    out = os.path.join(work, "results.ecsv")
    r = run("search", "-q", "--config", demo, "--set", "save_all_stamps=true", small, "-o", out)
    check(r.returncode == 0, "the demo search runs: " + r.stderr)
    for path in (out, os.path.join(work, "results.fits")):
        t = Table.read(path)
        check(len(t) == 1, f"{path}: one row, got {len(t)}")
        for name, kind in required.items():
            check(name in t.colnames and t[name].dtype.kind == kind, f"{path}: column {name} of kind {kind}")
        check((int(t["x"][0]), int(t["y"][0])) == (11, 27), f"{path}: KBMOD's starting pixel (11, 27)")
        check(abs(t["vx"][0] - 16.66) < 0.01 and abs(t["vy"][0] - 3.38) < 0.01, f"{path}: KBMOD's velocity")
        check(t["psi_curve"].shape == (1, 10) and t["obs_valid"].dtype == bool, f"{path}: light curves per epoch")
        check(t["stamp"].shape == (1, 21, 21), f"{path}: the stamp is 21 x 21")
        for name in ("pred_x", "pred_y", "img_ra", "img_dec", "global_ra", "global_dec"):
            check(t[name].shape == (1, 10), f"{path}: {name} per epoch")
        check("all_stamps" not in t.colnames, f"{path}: all_stamps is in its own file (separate_col_files)")
        # KBMOD's track from the first epoch: x + vx (t - t0) is pred_x.
        if path.endswith(".ecsv"):
            mjd = np.array(t.meta["mjd_mid"])
            check(np.allclose(t["x"][0] + t["vx"][0] * (mjd - mjd[0]), t["pred_x"][0], atol=1e-9), "pred_x = x + vx t")
            tai = Time(mjd, format="mjd", scale="utc").tai.mjd
            check(np.allclose(tai, t.meta["mjd_tai_mid"], atol=1e-9), "mjd_tai_mid is the UTC epochs in TAI")
            # The table's WCS as KBMOD's deserialize_wcs reads it.
            header = json.loads(t.meta["wcs"])
            wcs = WCS(header)
            wcs.pixel_shape = (header["NAXIS1"], header["NAXIS2"])
            sky = wcs.pixel_to_world(t["pred_x"][0], t["pred_y"][0])
            check(np.allclose(sky.ra.deg, t["global_ra"][0], atol=1e-9), "global_ra through the table's WCS")
            check(np.allclose(sky.dec.deg, t["global_dec"][0], atol=1e-9), "global_dec through the table's WCS")
            with fits.open(os.path.join(small, "000003.fits")) as h:
                own = WCS(h[1].header).pixel_to_world(t["pred_x"][0][3], t["pred_y"][0][3])
            check(abs(own.ra.deg - t["img_ra"][0][3]) < 1e-9, "img_ra through that exposure's WCS")
    # all_stamps the way KBMOD's Results.load_column reads a separate column file.
    with fits.open(os.path.join(work, "results_all_stamps.fits")) as h:
        check(h[0].header["NUMRES"] == 1 and h[0].header["ISIMG"] and h[0].header["COLNAME"] == "all_stamps",
              "separate column header")
        check(h["IMG_0"].data.shape == (10, 21, 21), "one 10 x 21 x 21 stack of stamps per row")
        check(np.isfinite(h["IMG_0"].data[0, 10, 10]), "the first epoch's centre pixel has data")

    # No result at all: both tables still read (astropy 5.2 cannot read fixed-shape array
    # columns without rows, so an empty ECSV declares them variable-length).
    empty = os.path.join(work, "empty.ecsv")
    r = run("search", "-q", "--config", demo, "--set", "lh_level=1000", small, "-o", empty)
    check(r.returncode == 0, "the empty search runs: " + r.stderr)
    for path in (empty, os.path.join(work, "empty.fits")):
        t = Table.read(path)
        check(len(t) == 0 and all(n in t.colnames for n in required), f"{path}: an empty table with KBMOD's columns")
    check(Table.read(empty).meta["column_shapes"]["psi_curve"] == [10], "the empty table records the array shapes")

    # An extension shiftstack does not write.
    r = run("search", "-q", small, "-o", os.path.join(work, "results.csv"))
    check(r.returncode == 1 and ".ecsv and .fits" in r.stderr, "-o results.csv is refused: " + r.stderr)
    check(not os.path.exists(os.path.join(work, "results.csv.ecsv")), "and nothing is written")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
