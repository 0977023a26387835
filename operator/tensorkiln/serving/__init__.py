"""Serving compiled engines with NVIDIA Triton Inference Server.

`enginefetch`: the Triton pod's init container (`tensorkiln-engine-fetch`), which fetches and
verifies an engine from the registry and lays out Triton's model repository.
`python_backend/model.py`: the Triton Python-backend model that serves OpenVINO and onnxruntime
engines where Triton has only the python backend (the local node's nvidia-pytriton server).
`client`: finding a model's ready Triton pods, and gRPC inference against them.
"""
