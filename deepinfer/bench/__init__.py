"""Benchmark runners (deepinfer bench ...) and their plots."""
