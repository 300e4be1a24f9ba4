"""c4's wire messages: the code generated from proto/c4.proto (``c4_pb2``, ``c4_pb2_grpc``) and
the helpers around it (the columnar codec, the health records, the sampling rule).

The generated modules live here, under the ``c4`` namespace, so that installing c4 never puts a
top-level ``proto`` package into an environment; the schema itself stays in the repository's
proto/ folder (``python -m proto.generate`` writes the modules here).
"""
