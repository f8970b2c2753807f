"""Importers: public measured data (AIConfigurator perf DB, Vidur CSVs) -> frontier profile schema."""
