"""Workload sources for the simulator: arrival process and request datasets.

The public entry point is :func:`simulator.workload.generate_requests`; the modules here
each hold one dataset (random, ShareGPT, trace) or the arrival process.
"""
