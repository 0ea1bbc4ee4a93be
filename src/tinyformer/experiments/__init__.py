"""Experiments: named grids of config overrides, trained (or reused) and written up as reports."""
