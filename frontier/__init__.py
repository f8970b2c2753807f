"""Shared vocabulary: models, GPUs, parallel layouts, operator specs, the CLI."""
