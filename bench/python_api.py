"""Costs of the Python API against the command line (bench/RESULTS.md, "Python API").

    PYTHONPATH=build/python python3 bench/python_api.py --cli build/bin/shiftstack [--workload kbmod] [--json out.json]

Measures: the import time of `shiftstack` (fresh interpreters, against `import numpy` alone);
the per-call overhead of scan() and search() on a tiny stack (wall time of the Python call minus
the time the engine or the stages report); and one search of a kit written to FITS files, from
the command line (`shiftstack search`, a fresh process) and from Python (read_fits + search, then
a second search of the same Stack, which reuses its maps and cube). Wall times, median of the
given repeats; the machine is named in the output.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import shiftstack


def wall(command, repeats, env=None, pick=statistics.median):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - start)
    return pick(times)


def import_times(repeats):
    """Seconds added to a fresh interpreter's start by each import (numpy loads only when an
    array first crosses the boundary, so `import shiftstack` alone does not load it)."""
    python = sys.executable
    env = dict(os.environ)

    def fastest(code):  # the minimum: other work on the machine only ever adds time
        return wall([python, "-c", code], repeats, env, pick=min)

    base = fastest("pass")
    numpy_only = fastest("import numpy")
    ours = fastest("import shiftstack")
    both = fastest("import numpy, shiftstack")
    table = fastest("import shiftstack, astropy.table")
    return {"interpreter_s": base, "numpy_s": numpy_only - base, "shiftstack_s": ours - base,
            "shiftstack_after_numpy_s": both - numpy_only, "shiftstack_and_astropy_table_s": table - base}


def tiny_stack():
    rng = np.random.default_rng(5)
    e, h, w = 4, 16, 16
    return shiftstack.Stack(rng.normal(0, 1, (e, h, w)).astype(np.float32), np.ones((e, h, w), np.float32),
                            epochs=60000 + np.arange(e) * 0.5, psf_sigma=1.0)


def call_overheads(repeats):
    stack = tiny_stack()
    bank = shiftstack.Bank(stack.epochs, [0.0], [0.0])
    config = shiftstack.Config(generator_config={"name": "VelocityGridSearch", "vx_steps": 1, "min_vx": 0,
                                                 "max_vx": 0, "vy_steps": 1, "min_vy": 0, "max_vy": 0},
                               lh_level=3, num_obs=1, stamp_radius=2)
    shiftstack.scan(stack, bank, engine="cpu")
    shiftstack.search(stack, config, engine="cpu")
    scan_over, search_over, scan_wall, search_wall = [], [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        r = shiftstack.scan(stack, bank, engine="cpu")
        t = time.perf_counter() - start
        scan_wall.append(t)
        scan_over.append(t - r.seconds)
        start = time.perf_counter()
        s = shiftstack.search(stack, config, engine="cpu")
        t = time.perf_counter() - start
        search_wall.append(t)
        search_over.append(t - s.seconds)
    start = time.perf_counter()
    for _ in range(repeats):
        shiftstack.Config(lh_level=6)
    config_s = (time.perf_counter() - start) / repeats
    return {"repeats": repeats, "scan_wall_s": statistics.median(scan_wall),
            "scan_overhead_s": statistics.median(scan_over), "search_wall_s": statistics.median(search_wall),
            "search_overhead_s": statistics.median(search_over), "config_s": config_s}


def search_comparison(cli, workload, repeats, engine):
    with tempfile.TemporaryDirectory() as folder:
        kit_dir = os.path.join(folder, "kit")
        subprocess.run([cli, "write-kit", "--workload", workload, "--out", kit_dir], check=True, capture_output=True)
        yaml = os.path.join(kit_dir, "search.yaml")
        out = os.path.join(folder, "out", "r.ecsv")
        os.makedirs(os.path.dirname(out))
        command = [cli, "search", "--quiet", "--no-fits", "--no-stamps", "--engine", engine, "--set",
                   "likelihood_device=cpu", "--config", yaml, kit_dir, "-o", out]
        cli_s, cli_scan, first, again, read_s, python_scan = [], [], [], [], [], []
        digests = set()
        for _ in range(repeats):  # alternating, so that load on the machine hits both alike
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            cli_s.append(time.perf_counter() - start)
            with open(out.replace(".ecsv", ".summary.json")) as f:
                summary = json.load(f)
            cli_scan.append(next(s["seconds"] for s in summary["stages"] if s["stage"] == "search"))
            digests.add(json.dumps(summary["digest"], sort_keys=True))
            config = shiftstack.Config.load(yaml).replace(likelihood_device="cpu")
            start = time.perf_counter()
            stack = shiftstack.read_fits(kit_dir, config)
            read_s.append(time.perf_counter() - start)
            r1 = shiftstack.search(stack, config, engine=engine)
            first.append(time.perf_counter() - start)
            python_scan.append(next(s[1] for s in r1.stages if s[0] == "search"))
            start = time.perf_counter()
            r2 = shiftstack.search(stack, config, engine=engine)
            again.append(time.perf_counter() - start)
            digests.add(json.dumps(r1.digest, sort_keys=True))
            digests.add(json.dumps(r2.digest, sort_keys=True))
        med = statistics.median
        return {"workload": workload, "engine": engine, "repeats": repeats, "cli_search_s": med(cli_s),
                "cli_scan_stage_s": med(cli_scan), "python_read_s": med(read_s),
                "python_read_and_search_s": med(first), "python_scan_stage_s": med(python_scan),
                "python_search_again_s": med(again), "same_digest_as_cli": len(digests) == 1}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True, help="the built shiftstack command")
    parser.add_argument("--workload", default="ci", help="kit workload of the search comparison")
    parser.add_argument("--engine", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    record = {"machine": shiftstack.machine(), "threads": shiftstack.threads(), "version": shiftstack.__version__,
              "python": sys.version.split()[0], "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "import": import_times(30), "calls": call_overheads(200),
              "search": search_comparison(args.cli, args.workload, args.repeats, args.engine)}
    print(json.dumps(record, indent=2))
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(record, f, indent=2)
        os.replace(args.json + ".tmp", args.json)


if __name__ == "__main__":
    main()
