"""Engines, validation and the device state from Python."""

import shiftstack


def test_engine_list():
    names = [e["name"] for e in shiftstack.engines()]
    assert "reference" in names and "cpu" in names
    assert shiftstack.best_engine() in names
    assert shiftstack.encodings() == ["fp32", "fp16", "int8"]
    assert set(shiftstack.workloads()) == {"ci", "kbmod", "dense", "deep", "nights"}
    assert shiftstack.threads() >= 1


def test_validate_runs_the_cores_study():
    report = shiftstack.validate("cpu", "int8", baseline="cpu", pairs=3, null_window=16, completeness=False,
                                 bootstrap=200)
    assert report["method"]["engine"] == "cpu" and report["method"]["encoding"] == "int8"
    assert 0.97 < report["retention"]["value"] < 1.03
    assert "retention" in report["table"]
    same = shiftstack.validate("cpu", "fp32", baseline="cpu", pairs=2, null_window=16, completeness=False,
                               bootstrap=100)
    assert same["retention"]["value"] == 1.0


def test_device_state_without_a_gpu():
    if shiftstack.cuda_available():
        assert shiftstack.device_memory()[1] > 0
    else:
        assert shiftstack.device_memory() is None
        shiftstack.release_device_cache()  # harmless without CUDA
