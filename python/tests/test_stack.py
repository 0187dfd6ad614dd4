"""Stacks from numpy arrays: accepted layouts, read-only views, and clear errors for bad input."""

import numpy as np
import pytest

import shiftstack

E, H, W = 6, 24, 20


def planes(seed=0):
    rng = np.random.default_rng(seed)
    science = rng.normal(0, 1, (E, H, W)).astype(np.float32)
    variance = np.ones((E, H, W), np.float32)
    mask = np.zeros((E, H, W), np.uint8)
    mask[:, 3, 4] = 1
    epochs = 60000.0 + np.arange(E) * 0.37
    return science, variance, mask, epochs


def test_arrays_make_a_stack_and_views_share_its_memory():
    science, variance, mask, epochs = planes()
    stack = shiftstack.Stack(science, variance, mask, epochs=epochs, psf_sigma=1.2)
    assert stack.shape == (E, H, W) and len(stack) == E
    np.testing.assert_array_equal(stack.epochs, epochs)
    np.testing.assert_array_equal(stack.throughput, np.ones(E))
    view = stack.science(2)
    np.testing.assert_array_equal(view, science[2])
    assert not view.flags.writeable
    assert view.base is not None and np.shares_memory(view, stack.science(2))  # a view, not a copy
    with pytest.raises(ValueError):
        view[0, 0] = 1
    np.testing.assert_array_equal(stack.mask(1), mask[1])
    psf = stack.psf(0)
    assert psf.shape[0] % 2 == 1 and abs(psf.sum() - 1) < 1e-5


def test_lists_float64_bool_masks_and_kernels_are_accepted():
    science, variance, mask, epochs = planes()
    kernel = np.zeros((3, 3))
    kernel[1, 1] = 1.0
    stack = shiftstack.Stack([s.astype(np.float64) for s in science], list(variance), mask.astype(bool),
                             epochs=list(epochs), psf=kernel, throughput=0.5, curve=np.zeros((E, 2)))
    np.testing.assert_array_equal(stack.science(0), science[0])
    np.testing.assert_array_equal(stack.throughput, np.full(E, 0.5))
    np.testing.assert_array_equal(stack.psf(3), kernel.astype(np.float32))
    assert stack.mask(0)[3, 4] == 1 and stack.mask(0).sum() == 1
    # A non-contiguous slice is read correctly too.
    strided = np.ascontiguousarray(np.repeat(science, 2, axis=2))[:, :, ::2]
    assert not strided.flags.c_contiguous
    s2 = shiftstack.Stack(strided, variance, epochs=epochs, psf_sigma=[1.0] * E)
    np.testing.assert_array_equal(s2.science(4), science[4])
    assert s2.mask(0) is None


def error_of(**changes):
    science, variance, mask, epochs = planes()
    args = dict(science=science, variance=variance, mask=mask, epochs=epochs, psf_sigma=1.2)
    args.update(changes)
    with pytest.raises(ValueError) as info:
        shiftstack.Stack(args.pop("science"), args.pop("variance"), args.pop("mask"), **args)
    return str(info.value)


def test_bad_arrays_raise_clear_value_errors():
    science, variance, mask, epochs = planes()
    assert "science: dtype int32 is not accepted" in error_of(science=science.astype(np.int32))
    assert "mask: dtype float32 is not accepted" in error_of(mask=mask.astype(np.float32))
    assert "expected a 3-D array" in error_of(science=science[0])
    assert "variance: 5 exposures, science has 6" in error_of(variance=variance[:5])
    assert "has shape (24, 19)" in error_of(variance=variance[:, :, :19])
    assert "epochs: expected one value per exposure (6)" in error_of(epochs=epochs[:4])
    assert "give exactly one of psf" in error_of(psf_sigma=None)
    assert "psf_sigma: must be finite and > 0" in error_of(psf_sigma=-1.0)
    assert "science[1]: dtype <U5 is not accepted" in error_of(science=[science[0], "words"])
    assert "science: dtype object is not accepted" in error_of(science=object())


def test_nan_and_bad_values_name_the_exposure_and_pixel():
    science, variance, mask, epochs = planes()
    bad = science.copy()
    bad[3, 5, 7] = np.nan
    msg = error_of(science=bad)
    assert "exposure 3" in msg and "NaN/inf science" in msg and "x=7, y=5" in msg
    bad[3, 5, 7] = 0
    bad_var = variance.copy()
    bad_var[1, 2, 2] = 0
    assert "exposure 1" in error_of(variance=bad_var) and "variance <= 0" in error_of(variance=bad_var)
    # A masked NaN is fine: masked pixels carry no weight.
    masked = science.copy()
    masked[0, 3, 4] = np.nan
    shiftstack.Stack(masked, variance, mask, epochs=epochs, psf_sigma=1.2)
    dup = epochs.copy()
    dup[2] = dup[1]
    assert "duplicate epoch" in error_of(epochs=dup)
    assert "PSF sums to" in error_of(psf_sigma=None, psf=np.ones((3, 3)))
    assert "odd-sized" in error_of(psf_sigma=None, psf=np.full((2, 2), 0.25))


def test_stack_caches_its_maps_between_searches():
    science, variance, mask, epochs = planes()
    stack = shiftstack.Stack(science, variance, mask, epochs=epochs, psf_sigma=1.2)
    assert stack.cached_bytes == 0
    cfg = shiftstack.Config(generator_config={"name": "VelocityGridSearch", "vx_steps": 3, "min_vx": -1,
                                              "max_vx": 1, "vy_steps": 3, "min_vy": -1, "max_vy": 1})
    first = shiftstack.search(stack, cfg, engine="cpu")
    assert stack.cached_bytes > 0
    second = shiftstack.search(stack, cfg, engine="cpu")
    first_stages = {s[0]: s for s in first.stages}
    second_stages = {s[0]: s for s in second.stages}
    assert "computed for this Stack" in first_stages["likelihood"][2] and first_stages["likelihood"][1] > 0
    assert "kept from an earlier search" in second_stages["likelihood"][2]
    assert "kept from an earlier search" in second_stages["encode"][2]
    assert first.digest == second.digest
    stack.clear_cache()
    assert stack.cached_bytes == 0


def test_wcs_gives_sky_positions():
    astropy_wcs = pytest.importorskip("astropy.wcs")
    science, variance, mask, epochs = planes()
    w = astropy_wcs.WCS(naxis=2)
    w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
    w.wcs.crval = [150.0, 2.0]
    w.wcs.crpix = [W / 2, H / 2]
    w.wcs.cdelt = [-0.263 / 3600, 0.263 / 3600]
    stack = shiftstack.Stack(science, variance, mask, epochs=epochs, psf_sigma=1.2, wcs=w)
    assert stack.has_wcs
    with pytest.raises(ValueError, match="wcs: 2 entries for 6 exposures"):
        shiftstack.Stack(science, variance, mask, epochs=epochs, psf_sigma=1.2, wcs=[w, w])
