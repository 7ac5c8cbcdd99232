"""``soak import``: a foreign trace (CSV, nvidia-smi, dcgmi dmon, gpu-burn) becomes a normal
run folder, analysed and reported like a live run. One module per format, ``core`` shared;
the command's registry of formats is ``soak.cli.importing.FORMATS``."""
