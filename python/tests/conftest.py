"""Shared fixtures: the built command-line tool (to compare with), and kits written as files."""

import os
import pathlib
import subprocess

import pytest

import shiftstack


def cli_path():
    given = os.environ.get("SHIFTSTACK_CLI")
    if given:
        return given
    # From the build tree: build/python/shiftstack/__init__.py -> build/bin/shiftstack
    return str(pathlib.Path(shiftstack.__file__).resolve().parents[2] / "bin" / "shiftstack")


@pytest.fixture(scope="session")
def cli():
    path = cli_path()
    if not os.path.exists(path):
        pytest.fail(f"the shiftstack command is not built at {path} (set SHIFTSTACK_CLI)")
    return path


@pytest.fixture(scope="session")
def ci_kit():
    return shiftstack.kit("ci", seed=1)


@pytest.fixture(scope="session")
def kit_folder(cli, tmp_path_factory):
    """The ci kit written as FITS files (one per exposure, with WCS), with its search.yaml."""
    folder = tmp_path_factory.mktemp("kit") / "ci"
    subprocess.run([cli, "write-kit", "--workload", "ci", "--out", str(folder)], check=True, capture_output=True)
    return folder


@pytest.fixture(scope="session")
def straight_kit():
    """The ci kit without its common curve: a WorkUnit cannot carry one."""
    return shiftstack.kit("ci", seed=2, curve=False)


@pytest.fixture(scope="session")
def workunit_file(straight_kit, tmp_path_factory):
    """That kit as one KBMOD WorkUnit file."""
    path = tmp_path_factory.mktemp("workunit") / "workunit.fits"
    straight_kit.stack.write_workunit(str(path))
    return path
