"""The serving speed benchmark: run matrix, in-process floor, report."""
