"""ONNX export of trained gates (`export_gate`), optimisation/quantisation variants, parity.

Import `retrieval_gate.export.onnx_export` for the exporter (needs torch); `gates.onnx_format` is the
torch-free contract the ONNX gate reads (it lives beside that gate)."""
