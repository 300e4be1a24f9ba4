"""The schema folder: c4.proto and the generator that writes its Python code into ``c4.proto``.

Not part of the installed package; run ``python -m proto.generate`` from the repository root.
"""
