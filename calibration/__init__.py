"""Calibration: importers, per-family predictors and bundles (issue 3). Never imports torch."""
