"""Holds the ``sitecustomize.py`` that ``c4 run`` puts first on ``PYTHONPATH``."""
