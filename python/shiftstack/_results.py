"""What searches return: columns as numpy arrays, the digest, and an astropy Table on request."""


class Results:
    """The results of search(): one row per candidate, best first.

    results["x"], results["likelihood"], ... are numpy arrays (light curves and stamps have one
    more axis per row); results.colnames lists them in the command line's table order.
    results.digest is the whole search's digest (SPEC 4); stages, counts, warnings, engine,
    encoding and config describe the run. to_table() gives an astropy Table with the columns,
    units and metadata of the command line's ECSV file.
    """

    def __init__(self, raw):
        self.columns = raw["columns"]
        self.units = raw["units"]
        self.descriptions = raw["descriptions"]
        self.meta = raw["meta"]
        self.digest = raw["digest"]
        self.engine = raw["engine"]
        self.encoding = raw["encoding"]
        self.likelihood_device = raw["likelihood_device"]
        self.stages = raw["stages"]
        self.counts = raw["counts"]
        self.warnings = raw["warnings"]
        self.config = raw["config"]

    @property
    def colnames(self):
        return list(self.columns)

    def __len__(self):
        return len(self.columns["x"])

    def __getitem__(self, name):
        return self.columns[name]

    def __contains__(self, name):
        return name in self.columns

    def __iter__(self):
        return iter(self.columns)

    @property
    def seconds(self):
        """Wall time of the run, summed over its stages."""
        return sum(s[1] for s in self.stages)

    def to_table(self):
        """An astropy Table with the command line's columns (x, y, vx, vy, likelihood, flux,
        obs_count, uuid, ..., psi_curve, phi_curve, obs_valid, ra/dec, stamp, coadd_<type>),
        their units and descriptions, and the run's metadata. KBMOD's Results accepts it."""
        try:
            from astropy.table import Table
        except ImportError as e:  # astropy is optional: only this method needs it
            raise ImportError("Results.to_table() needs astropy (Debian: python3-astropy)") from e
        table = Table(meta=dict(self.meta))
        for name, values in self.columns.items():
            table[name] = values
            if self.units[name]:
                table[name].unit = self.units[name]
            table[name].description = self.descriptions[name]
        return table

    def __repr__(self):
        d = self.digest
        return (f"<shiftstack.Results {len(self)} candidates, engine {self.engine} ({self.encoding}), "
                f"maxZ {d['maxZ']:.3f} at x={d['argmax']['x']} y={d['argmax']['y']}, {self.seconds:.3f} s>")


class ScanResult:
    """What scan() returns: the digest, the engine's own time of the scan (seconds) and the wall
    time around it, and, when asked, `candidates` (every trial above the threshold: x, y,
    velocity, vx, vy, A, B, Z, flux, obs_count as numpy arrays) and `top_k` (the same fields,
    shaped (origins, k))."""

    def __init__(self, raw):
        self.digest = raw["digest"]
        self.engine = raw["engine"]
        self.encoding = raw["encoding"]
        self.seconds = raw["seconds"]
        self.wall_seconds = raw["wall_seconds"]
        self.candidates = raw["candidates"]
        self.top_k = raw.get("top_k")

    def __repr__(self):
        d = self.digest
        return (f"<shiftstack.ScanResult engine {self.engine} ({self.encoding}): maxZ {d['maxZ']:.4f} at "
                f"x={d['argmax']['x']} y={d['argmax']['y']} v={d['argmax']['velocity']}, count {d['count']}, "
                f"{self.seconds:.4f} s>")
