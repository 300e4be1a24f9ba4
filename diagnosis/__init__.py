"""Diagnosis: detect, localize and report faults from collective telemetry."""
