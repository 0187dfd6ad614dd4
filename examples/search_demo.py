"""Search the demo stack (the benchmark kit's `ci` workload, as `shiftstack demo` builds it),
print the results table, and plot the best candidate's coadded stamps and light curve.

    PYTHONPATH=build/python python3 examples/search_demo.py --out demo.png
"""

import argparse

import matplotlib

matplotlib.use("Agg")  # files only: runs headless
import matplotlib.pyplot as plt
import numpy as np

import shiftstack


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="search_demo.png", help="the figure to write (PNG)")
    parser.add_argument("--engine", default=None, help="search engine (default: the fastest here)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    kit = shiftstack.kit("ci", seed=args.seed)  # 32 exposures of 128x128, one source at SNR 8
    results = shiftstack.search(kit.stack, kit.config(), engine=args.engine)
    table = results.to_table()
    print(table["x", "y", "vx", "vy", "likelihood", "flux", "obs_count"])
    print(f"injected: x={kit.truth['x']} y={kit.truth['y']} vx={kit.truth['vx']:.4f} vy={kit.truth['vy']:.4f}")
    print(f"engine {results.engine}, {results.seconds:.3f} s, digest maxZ {results.digest['maxZ']:.3f}")
    if len(table) == 0:
        raise SystemExit("no candidate above lh_level")

    best = int(np.argmax(table["likelihood"]))
    coadds = [name for name in table.colnames if name.startswith("coadd_")]
    fig = plt.figure(figsize=(3 * len(coadds), 6))
    grid = fig.add_gridspec(2, len(coadds))
    for column, name in enumerate(coadds):
        ax = fig.add_subplot(grid[0, column])
        ax.imshow(table[name][best], origin="lower", cmap="gray")
        ax.set_title(name.replace("coadd_", "") + " coadd")
        ax.set_xticks([]), ax.set_yticks([])

    epochs = kit.stack.epochs
    psi, phi = table["psi_curve"][best], table["phi_curve"][best]
    valid = table["obs_valid"][best]
    with np.errstate(divide="ignore", invalid="ignore"):
        per_epoch = np.where(phi > 0, psi / np.sqrt(phi), np.nan)  # likelihood of each exposure
    curve = fig.add_subplot(grid[1, :])
    order = np.argsort(epochs)
    curve.plot(epochs[order], per_epoch[order], color="0.7", lw=1)
    curve.scatter(epochs[valid], per_epoch[valid], s=14, label="kept (sigma-G)")
    curve.scatter(epochs[~valid], per_epoch[~valid], s=14, marker="x", color="C3", label="clipped or no data")
    curve.set_xlabel("epoch (MJD)")
    curve.set_ylabel("psi / sqrt(phi)")
    curve.set_title(f"light curve of x={table['x'][best]}, y={table['y'][best]}: "
                    f"likelihood {table['likelihood'][best]:.2f} over {table['obs_count'][best]} epochs")
    curve.legend(loc="best")
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
