"""search() is the command line's pipeline: the same table; it releases the GIL, stops when asked
(a CancelToken, Ctrl-C), keeps its memory flat over many searches and raises the core's errors."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import shiftstack


def test_table_equals_the_command_lines(cli, kit_folder, tmp_path):
    astropy_table = pytest.importorskip("astropy.table")
    out = tmp_path / "cli.ecsv"
    subprocess.run([cli, "search", "--quiet", "--engine", "cpu", "--config", str(kit_folder / "search.yaml"),
                    str(kit_folder), "-o", str(out)], check=True, capture_output=True)
    expected = astropy_table.Table.read(str(out))
    config = shiftstack.Config.load(str(kit_folder / "search.yaml"))
    stack = shiftstack.read_fits(str(kit_folder), config)
    assert stack.has_wcs and len(stack) == 32
    results = shiftstack.search(stack, config, engine="cpu")
    table = results.to_table()
    assert table.colnames == expected.colnames
    assert len(table) == len(expected) >= 1
    for name in expected.colnames:
        a, b = np.asarray(table[name]), np.asarray(expected[name])
        assert a.shape == b.shape, name
        if a.dtype.kind == "f":
            np.testing.assert_array_equal(a, b, err_msg=name)  # ECSV keeps doubles exactly
        else:
            assert (a == b).all(), name
        assert str(table[name].unit or "") == str(expected[name].unit or ""), name
    assert np.isfinite(table["ra_first"]).all()
    assert results.engine == "cpu" and results.encoding == "fp32"
    assert results.counts["after_clustering"] == len(table)


def test_columns_are_numpy_arrays(ci_kit):
    results = shiftstack.search(ci_kit.stack, ci_kit.config(), engine="cpu")
    n = len(results)
    assert n >= 1
    assert results["x"].dtype == np.int32 and results["likelihood"].dtype == np.float64
    assert results["psi_curve"].shape == (n, 32) and results["obs_valid"].dtype == np.bool_
    assert results["stamp"].shape == (n, 21, 21) and results["stamp"].dtype == np.float32
    best = int(np.argmax(results["likelihood"]))
    assert (results["x"][best], results["y"][best]) == (ci_kit.truth["x"], ci_kit.truth["y"])
    # likelihood is recomputed over the epochs kept by sigma-G clipping
    valid = results["obs_valid"][best]
    psi, phi = results["psi_curve"][best][valid], results["phi_curve"][best][valid]
    assert results["likelihood"][best] == pytest.approx(psi.sum() / np.sqrt(phi.sum()), rel=1e-12)
    assert results["obs_count"][best] == valid.sum()


def test_keywords_progress_and_errors(ci_kit):
    seen = []
    results = shiftstack.search(ci_kit.stack, ci_kit.config(), engine="cpu", lh_level=6.5, num_obs=20,
                                progress=lambda stage, seconds, detail: seen.append(stage))
    assert seen == [s[0] for s in results.stages]
    assert seen[:4] == ["bank", "likelihood", "encode", "search"]
    assert results.config["lh_level"] == 6.5 and results.config["num_obs"] == 20
    with pytest.raises(shiftstack.Error, match="unknown engine 'warp-drive'"):
        shiftstack.search(ci_kit.stack, ci_kit.config(), engine="warp-drive")
    with pytest.raises(shiftstack.Error, match="exceeds max_candidates"):
        shiftstack.search(ci_kit.stack, ci_kit.config(), engine="cpu", lh_level=0, max_candidates=10)
    with pytest.raises(shiftstack.Error, match="x_pixel_bounds|search region"):
        shiftstack.search(ci_kit.stack, ci_kit.config(), engine="cpu", x_pixel_bounds=[100, 500])

    def failing(stage, seconds, detail):
        if stage == "search":
            raise RuntimeError("stop from the callback")

    with pytest.raises(RuntimeError, match="stop from the callback"):
        shiftstack.search(ci_kit.stack, ci_kit.config(), engine="cpu", progress=failing)


def long_kit():
    # 65 x 65 velocities through the reference engine: about a minute uninterrupted here.
    return shiftstack.kit("ci", vx=65, vy=65)


def test_cancel_from_another_thread_while_the_gil_is_released():
    """The main thread cancels while the search runs in a worker: possible only if the search
    released the GIL, and it must stop at its next boundary with shiftstack.Cancelled."""
    k = long_kit()
    token = shiftstack.CancelToken()
    searching = threading.Event()
    outcome = {}

    def progress(stage, seconds, detail):
        if stage == "encode":
            searching.set()  # the engine starts next

    def worker():
        try:
            shiftstack.search(k.stack, k.config(), engine="reference", cancel=token, progress=progress)
            outcome["result"] = "finished"
        except shiftstack.Cancelled as e:
            outcome["result"] = "cancelled"
            outcome["message"] = str(e)

    thread = threading.Thread(target=worker)
    thread.start()
    assert searching.wait(60)
    ticks = 0
    while ticks < 200000:  # Python work on this thread while the worker searches
        ticks += 1
    token.cancel()
    thread.join(60)
    assert not thread.is_alive()
    assert outcome["result"] == "cancelled"
    assert "stopped on request" in outcome["message"]
    # a cancelled token stops the next call at once
    with pytest.raises(shiftstack.Cancelled):
        shiftstack.scan(k.stack, k.bank, engine="reference", cancel=token)


def test_ctrl_c_stops_a_long_search(tmp_path):
    script = tmp_path / "long_search.py"
    script.write_text(textwrap.dedent("""
        import sys, shiftstack
        k = shiftstack.kit("ci", vx=65, vy=65)
        def progress(stage, seconds, detail):
            if stage == "encode":
                print("searching", flush=True)
        shiftstack.search(k.stack, k.config(), engine="reference", progress=progress)
        print("finished", flush=True)
    """))
    env = dict(os.environ)
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    assert process.stdout.readline().strip() == "searching"
    time.sleep(1.0)  # into the engine's scan (about a minute uninterrupted)
    process.send_signal(signal.SIGINT)
    try:
        stdout, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("the search did not stop on SIGINT")
    assert process.returncode != 0
    assert "finished" not in stdout
    assert "KeyboardInterrupt" in stderr
    # chained to where the engine stopped: it did stop early, not after the whole search
    assert "shiftstack.Cancelled: reference engine: search stopped on request" in stderr


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_memory_stays_flat_over_100_searches(ci_kit):
    config = ci_kit.config()
    for _ in range(10):  # warm up: caches, allocator pools
        shiftstack.search(ci_kit.stack, config, engine="cpu")
    before = rss_bytes()
    digests = set()
    for _ in range(100):
        results = shiftstack.search(ci_kit.stack, config, engine="cpu")
        digests.add(results.digest["sumA"])
        del results
    grown = rss_bytes() - before
    assert len(digests) == 1
    assert grown < 4 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over 100 searches"


def test_memory_stays_flat_over_100_scans(ci_kit):
    for _ in range(10):
        shiftstack.scan(ci_kit.stack, ci_kit.bank, engine="cpu", candidate_threshold=5)
    before = rss_bytes()
    for _ in range(100):
        shiftstack.scan(ci_kit.stack, ci_kit.bank, engine="cpu", candidate_threshold=5)
    grown = rss_bytes() - before
    assert grown < 4 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over 100 scans"


def test_scan_region_candidates_and_top_k(ci_kit):
    full = shiftstack.scan(ci_kit.stack, ci_kit.bank, engine="cpu", candidate_threshold=5.0, top_k=2)
    ref = shiftstack.scan(ci_kit.stack, ci_kit.bank, engine="reference", candidate_threshold=5.0, top_k=2)
    assert (full.candidates["Z"] > 5.0).all()
    np.testing.assert_array_equal(full.candidates["x"], ref.candidates["x"])
    np.testing.assert_allclose(full.candidates["Z"], ref.candidates["Z"], atol=1e-4)
    assert full.top_k["Z"].shape == (128 * 128, 2)
    with pytest.raises(shiftstack.Error, match="exceeds max_candidates"):
        shiftstack.scan(ci_kit.stack, ci_kit.bank, engine="cpu", candidate_threshold=0, max_candidates=100)
    part = shiftstack.scan(ci_kit.stack, ci_kit.bank, engine="cpu", region=(80, 80, 20, 16))
    assert part.digest["trials"] == 20 * 16 * len(ci_kit.bank)
    assert part.digest["argmax"]["x"] == ci_kit.truth["x"]
