"""What the report finds: dataclasses and computations over the inputs, no HTML, no drawing.

Claims and their exact tests, power, verdicts, targets and the ladder, the gain, the noise
scale, evaluation spacing, mechanisms, the regime sweeps and map, scale, tuning, equal time,
sensitivity and the per-run summary. The tables, the figures and the page read these.
"""
