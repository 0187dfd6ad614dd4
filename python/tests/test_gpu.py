"""On a CUDA device: several searches in one process share one upload of the cube, and a failed
search leaves no device memory behind. Skipped where no device (or no CUDA build) exists."""

import pytest

import shiftstack

pytestmark = pytest.mark.skipif(not shiftstack.cuda_available(), reason="no CUDA device (or a build without CUDA)")

GATHERS = ["cuda-serial", "cuda-tiled", "cuda-fast"]  # the gathers that read the cached cube
CACHED = GATHERS + ["cuda-tree"]  # every engine that reads it (cuda-tree is the auto choice)


def used_bytes():
    free, total = shiftstack.device_memory()
    return total - free


def test_searches_reuse_the_device_and_its_upload(ci_kit):
    shiftstack.release_device_cache()
    before = shiftstack.device_uploads()
    config = ci_kit.config()
    first = shiftstack.search(ci_kit.stack, config, engine="cuda-fast", likelihood_device="cpu")
    after_first = shiftstack.device_uploads()
    assert after_first["uploads"] == before["uploads"] + 1
    for engine in CACHED:
        r = shiftstack.search(ci_kit.stack, config, engine=engine, likelihood_device="cpu")
        assert r.digest["argmax"] == first.digest["argmax"]
        s = shiftstack.scan(ci_kit.stack, ci_kit.bank, engine=engine)
        assert s.digest["argmax"] == first.digest["argmax"]
    after = shiftstack.device_uploads()
    assert after["uploads"] == after_first["uploads"]  # no second upload of the same Stack's cube
    assert after["reuses"] >= after_first["reuses"] + 2 * len(CACHED)


def test_gpu_digests_agree_with_the_reference():
    records = shiftstack.bench("ci", engines=GATHERS, encodings="all", runs=1, warmup=0, baseline="reference")
    for r in records:
        assert r["agrees"] is True, (r["engine"], r["encoding"], r["comparison"])


@pytest.mark.parametrize("engine", CACHED)
def test_device_memory_is_freed_when_a_search_fails(ci_kit, engine):
    config = ci_kit.config()
    shiftstack.search(ci_kit.stack, config, engine=engine, likelihood_device="cpu")  # context, plans, kernels
    shiftstack.release_device_cache()
    baseline = used_bytes()
    # The gathers' candidate lists and cuda-tree's screened trials both stop at max_candidates.
    with pytest.raises(shiftstack.Error, match="max_candidates"):
        shiftstack.search(ci_kit.stack, config, engine=engine, likelihood_device="cpu", lh_level=0, max_candidates=10)
    assert used_bytes() <= baseline  # the cube uploaded for the failed search is gone
    with pytest.raises(shiftstack.Error, match="max_candidates"):
        shiftstack.scan(ci_kit.stack, ci_kit.bank, engine=engine, candidate_threshold=-100, max_candidates=10)
    assert used_bytes() <= baseline
    # and the device still works afterwards
    ok = shiftstack.scan(ci_kit.stack, ci_kit.bank, engine=engine)
    assert ok.digest["argmax"]["x"] == ci_kit.truth["x"]


def test_device_memory_is_freed_when_a_search_is_cancelled(ci_kit):
    shiftstack.scan(ci_kit.stack, ci_kit.bank, engine="cuda-fast")
    shiftstack.release_device_cache()
    baseline = used_bytes()
    token = shiftstack.CancelToken()
    token.cancel()
    with pytest.raises(shiftstack.Cancelled):
        shiftstack.scan(ci_kit.stack, ci_kit.bank, engine="cuda-fast", cancel=token)
    assert used_bytes() <= baseline
