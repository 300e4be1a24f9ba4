"""Importers of cluster topology sources (see diagnosis/topology/README.md)."""
