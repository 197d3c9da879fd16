"""Calibration of a device: its max micro-batch and its step-time curve.

``adloco calibrate`` runs after tokenization (it needs the vocabulary and the
sequence length from the manifest) and before training, once per entry of
``cluster.devices``, and writes ``results/<experiment>/calibration/<device>.json``
(:func:`adloco.core.paths.calibration_file`).

*Max batch.* Training reads it through
:func:`adloco.formats.calibration.load_max_batch` to cap micro-batches (the
switch mode's ``max_batch``). The search trains the configured model on
random tokens and doubles, then bisects, the batch until a trial's peak
memory exceeds the slot's share (:mod:`adloco.calibrate.memory_search`). A
device whose ``max_batch`` is set in the config skips the search.

*Step time.* Every device then times, on the device the command runs on, one
forward+backward pass at micro-batches 1, 2, 4, … up to ``nodes_per_device ×
max_batch`` and one optimizer update (:mod:`adloco.calibrate.step_timing`).
The simulated clock (:mod:`adloco.formats.clock`) charges steps from the curve the
device's ``step_time`` block selects: the measured one times ``scale``, or a
declared roofline (:mod:`adloco.calibrate.step_time_model`); training reads it
through :func:`adloco.formats.calibration.load_step_time_curve`. The formulas
are in ``docs/calibration.md``.

The package, one idea a module: :mod:`~adloco.calibrate.memory_search` (the
max batch), :mod:`~adloco.calibrate.step_timing` (the timed curve),
:mod:`~adloco.calibrate.step_time_model` (the curve the clock charges),
:mod:`~adloco.calibrate.device` (the stage's entry: one device's record,
measured in order and written) and :mod:`~adloco.calibrate.bench` (the model
they share, and the engine's inner step they run on it).
"""
