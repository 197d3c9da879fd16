"""The report's files for other programs: the CSV tables, claims.json and metrics.json."""
