"""bench() and validate() from Python: the command line's `bench` and `validate` on the same core."""

import datetime
import statistics

from . import _shiftstack as _core

_BAND = 1e-4  # SPEC 4: fp32 counts may differ for trials this close to the threshold


def _engine_info(name):
    for e in _core.engines():
        if e["name"] == name:
            return e
    known = ", ".join(e["name"] for e in _core.engines())
    raise ValueError(f"unknown engine '{name}' (known: {known})")


def _expand(given, every, fallback):
    if given is None:
        return [fallback]
    if isinstance(given, str):
        given = [given]
    out = []
    for name in given:
        for each in (every if name == "all" else [name]):
            if each not in out:
                out.append(each)
    return out


def bench(workload="ci", engines=None, encodings=None, *, runs=5, warmup=1, baseline=None, seed=1,
          shifts="integer", cancel=None, **shape):
    """Time complete scans, as `shiftstack bench` does, and return one record (dict) per engine
    and encoding: seconds_median/min/max (the engines' own times), samples_per_second, digest,
    and `agrees` with the baseline engine's fp32 digest under SPEC 4's tolerances.

    engines, encodings: a name, a list, or "all" (default: the best engine, fp32). baseline:
    an engine name or "none" (default: reference on ci, else cuda-serial where available, else
    cpu). shape: exposures, width, height, vx, vy override the workload's.
    """
    custom = bool(shape)
    kit = _core.kit(workload, seed, shifts, **shape)
    stack, bank = kit.stack, kit.bank
    names = [e["name"] for e in _core.engines()]
    engine_list = _expand(engines, names, _core.best_engine())
    encoding_list = _expand(encodings, _core.encodings(), "fp32")
    if baseline is None:
        if workload == "ci" and not custom:
            baseline = "reference"
        elif "cuda-serial" in names and _engine_info("cuda-serial")["available"]:
            baseline = "cuda-serial"
        else:
            baseline = "cpu"
    exposures, height, width = stack.shape
    paired = float(width) * height * len(bank) * exposures
    from . import scan

    reference = None
    if baseline != "none":
        if not _engine_info(baseline)["available"]:
            raise ValueError(f"baseline {baseline}: engine is not available here")
        z_thr = _core.bonferroni_threshold(0.05, float(width) * height * len(bank))
        r = scan(stack, bank, engine=baseline, encoding="fp32", candidate_threshold=z_thr - _BAND, cancel=cancel)
        near = int(sum(1 for z in r.candidates["Z"] if abs(float(z) - r.digest["z_thr"]) <= _BAND))
        reference = (r.digest, near)

    records = []
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for engine in engine_list:
        info = _engine_info(engine)
        for encoding in encoding_list:
            record = {
                "engine": engine, "workload": "custom" if custom else workload, "base_workload": workload,
                "encoding": encoding, "shifts": shifts,
                "shape": {"exposures": exposures, "width": width, "height": height,
                          "vx": len(bank.vx), "vy": len(bank.vy), "velocities": len(bank)},
                "paired_samples": paired, "seed": seed, "runs": runs, "warmup": warmup,
                "threads": _core.threads(), "card": _core.machine(info["gpu"]),
                "commit": _core.__version__, "date": date, "interface": "python",
            }
            if not info["available"]:
                record["skipped"] = "not available here (no CUDA device?)"
                records.append(record)
                continue
            seconds, digests, walls = [], [], []
            try:
                for run in range(warmup + runs):
                    r = scan(stack, bank, engine=engine, encoding=encoding, cancel=cancel)
                    digests.append(r.digest)
                    if run >= warmup:
                        seconds.append(r.seconds)
                        walls.append(r.wall_seconds)
            except _core.Cancelled:
                raise
            except _core.Error as e:
                if "cannot compute this search" not in str(e):
                    raise
                record["skipped"] = str(e)
                records.append(record)
                continue
            t = statistics.median(seconds)
            record.update({
                "seconds_median": t, "seconds_min": min(seconds), "seconds_max": max(seconds),
                "wall_seconds_median": statistics.median(walls),
                "samples_per_second": paired / t, "digest": digests[-1],
                "deterministic": all(d == digests[0] for d in digests), "agrees": None,
            })
            if reference is not None:
                reduced = encoding != "fp32" or info["reduced_arithmetic"]
                cmp = _core.compare_digests(reference[0], digests[-1], "reduced" if reduced else "fp32", reference[1])
                record.update({"agrees": cmp["agrees"], "baseline": baseline, "baseline_encoding": "fp32",
                               "tolerance": "reduced" if reduced else "fp32", "comparison": cmp})
            records.append(record)
    return records


def validate(engine="reference", encoding="fp32", *, baseline="reference", workload="ci", pairs=16, seed=1,
             shifts="integer", null_window=0, null_window_placement="random", completeness=True,
             bootstrap=2000, first_pair=0):
    """Sensitivity validation of one engine x encoding against the FP32 exact gather (SPEC 7),
    as `shiftstack validate` runs it: retention of the effective SNR with its bootstrap interval,
    the null variance of Z near masks and away, excursion counts, completeness at a matched
    false-alarm rate. Returns the report as a dict (the command line's report.json) with the text
    table under "table". Runs to the end once started (no Ctrl-C mid-run)."""
    return _core._validate(engine, encoding, baseline, workload, int(pairs), int(seed), shifts, int(null_window),
                           null_window_placement, bool(completeness), int(bootstrap), int(first_pair))
