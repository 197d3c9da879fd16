"""The report's inputs, read and checked: the runs, calibration and variance results, the data's
reference perplexities, the base model and devices brought from elsewhere."""
