"""``soak fleet``: one soak per node under Slurm (``sbatch.py``), one report over many runs'
``summary.json`` or a foreign per-device table (``collect.py``, ``analyze.py``,
``report.py``), and a per-GPU history across acceptances (``history.py``).

The fleet reads ``summary.json`` files only, never a run's store (docs/fleet-schema.md)."""
