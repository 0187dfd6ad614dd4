"""The Python searches compute the command line's numbers: the digest of the ci kit, bit for bit."""

import json
import subprocess

import pytest

import shiftstack


def cli_demo(cli, *args):
    out = subprocess.run([cli, "demo", "--json", *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


@pytest.mark.parametrize("encoding", ["fp32", "fp16", "int8"])
def test_scan_equals_cli_demo(cli, ci_kit, encoding):
    expected = cli_demo(cli, "--engine", "cpu", "--encoding", encoding)
    got = shiftstack.scan(ci_kit.stack, ci_kit.bank, engine="cpu", encoding=encoding)
    assert got.digest == expected["digest"]  # every field, exact doubles
    assert got.engine == "cpu"


def test_reference_scan_equals_cli_demo(cli, ci_kit):
    expected = cli_demo(cli, "--engine", "reference")
    got = shiftstack.scan(ci_kit.stack, ci_kit.bank, engine="reference")
    assert got.digest == expected["digest"]


def test_fractional_scan_equals_cli_demo(cli):
    expected = cli_demo(cli, "--engine", "cpu", "--shifts", "fractional", "--seed", "3")
    kit = shiftstack.kit("ci", seed=3, shifts="fractional")
    got = shiftstack.scan(kit.stack, kit.bank, engine="cpu")
    assert got.digest == expected["digest"]


def test_pipeline_search_digest_equals_cli_demo(cli, ci_kit):
    """search() builds its bank from the config; the kit's config gives the kit's own bank."""
    expected = cli_demo(cli, "--engine", "cpu")
    results = shiftstack.search(ci_kit.stack, ci_kit.config(), engine="cpu")
    assert results.digest == expected["digest"]
    assert results.engine == "cpu"
    truth = ci_kit.truth
    assert (expected["digest"]["argmax"]["x"], expected["digest"]["argmax"]["y"]) == (truth["x"], truth["y"])


def test_bench_digest_equals_cli_bench(cli, tmp_path):
    out = tmp_path / "bench.json"
    subprocess.run([cli, "bench", "--engine", "cpu", "--runs", "1", "--warmup", "0", "--baseline", "none",
                    "--json", str(out)], check=True, capture_output=True)
    expected = json.loads(out.read_text())[0]
    got = shiftstack.bench("ci", engines="cpu", runs=1, warmup=0, baseline="none")[0]
    assert got["digest"] == expected["digest"]
    assert got["paired_samples"] == expected["paired_samples"]
    assert got["shape"] == expected["shape"]


def test_bench_checks_against_the_reference(ci_kit):
    records = shiftstack.bench("ci", engines=["cpu"], encodings="all", runs=1, warmup=0)
    assert [r["encoding"] for r in records] == ["fp32", "fp16", "int8"]
    for r in records:
        assert r["baseline"] == "reference"
        assert r["agrees"] is True, r["comparison"]
        assert r["deterministic"]
        assert r["seconds_median"] > 0


def test_compare_digests_flags_a_difference(ci_kit):
    d = shiftstack.scan(ci_kit.stack, ci_kit.bank, engine="cpu").digest
    assert shiftstack.compare_digests(d, d)["agrees"]
    moved = json.loads(json.dumps(d))
    moved["argmax"]["x"] += 1
    moved["sumA"] *= 1 + 1e-4
    c = shiftstack.compare_digests(d, moved)
    assert not c["agrees"]
    assert any("argmax" in f for f in c["failures"]) and any("sumA" in f for f in c["failures"])
