"""The file formats other packages read, below the configuration: the ground floor.

Each module is the one definition of a file or a quantity that more than one
package reads, written with the standard library and :mod:`adloco.core`
alone, so that :mod:`adloco.config` (which Snakemake imports while it parses
the workflow) and the report can read them without the trainer:

- :mod:`~adloco.formats.clock`: the step-time curve, the network model and the
  simulated clock that charges a round from its metrics rows;
- :mod:`~adloco.formats.calibration`: a device's calibration record;
- :mod:`~adloco.formats.metrics`: a run's metrics rows and its summary;
- :mod:`~adloco.formats.model_size`: the configured model's parameters and
  training-state bytes;
- :mod:`~adloco.formats.data_manifest`: the tokenized data's ``manifest.json``.

They import nothing of the package above :mod:`adloco.core`
(``tests/test_floors.py``).
"""
