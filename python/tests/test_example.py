"""examples/search_demo.py runs headless and draws its figure."""

import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("astropy")

SOURCE = pathlib.Path(os.environ.get("SHIFTSTACK_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


def test_search_demo_example(tmp_path):
    figure = tmp_path / "demo.png"
    env = dict(os.environ, MPLBACKEND="Agg")
    run = subprocess.run([sys.executable, str(SOURCE / "examples" / "search_demo.py"), "--out", str(figure),
                          "--engine", "cpu"], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "likelihood" in run.stdout and "injected: x=89 y=87" in run.stdout
    assert " 89  87 " in run.stdout  # the recovered candidate's row
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 10000
