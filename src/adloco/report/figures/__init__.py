"""The report's figures: matplotlib only, each a PNG's bytes drawn from the findings."""
