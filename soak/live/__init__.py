"""What watches a running soak: the terminal view and the Prometheus exporter. Both read only
the runner's ``Progress`` snapshot (README.md, "Watching a soak")."""
