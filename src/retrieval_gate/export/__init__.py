"""ONNX export of trained gates (`export_gate`), optimisation/quantisation variants, parity.

Import `retrieval_gate.export.onnx` for the exporter (needs torch); `export.metadata` is the
torch-free contract the ONNX gate reads."""
