"""What a run leaves for people and tools, formatted from its analysis: summary.json
(``summary``), junit.xml (``junit``) and the self-contained report.html (``html``, its
figures ``figures``), and two runs side by side (``compare``). The package formats what the
analysis computed; reading the run and writing its outputs is ``soak.pipeline``'s."""
