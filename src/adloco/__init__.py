"""adloco: a reproducible pipeline for AdLoCo (adaptive-batch DiLoCo).

Stages (each an ``adloco`` subcommand, wired by Snakemake and DVC): prepare the
corpus, tokenize it, calibrate the largest batch per device, analyse gradient
variance, train the methods and ablations, and report.
"""

__version__ = "0.1.0"
