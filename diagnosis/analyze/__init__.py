"""``c4 analyze``: offline diagnosis of a recorded trace or of Flight Recorder dumps."""
