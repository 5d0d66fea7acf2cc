"""Writing bundles: experts and gates as ONNX, the manifest, and LATEST."""
