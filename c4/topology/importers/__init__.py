"""Importers of cluster topology sources (see c4/topology/README.md)."""
