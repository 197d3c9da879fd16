"""Files, paths, errors and the CPU float paths: what every stage uses, without torch."""
