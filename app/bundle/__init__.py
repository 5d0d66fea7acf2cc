"""The bundle: its manifest schema, verification, and the numpy arithmetic around ONNX."""
