"""The report's page: HTML from the findings and the figures, through its templates."""
