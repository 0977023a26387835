"""Serving compiled engines with NVIDIA Triton Inference Server.

`enginefetch`: the Triton pod's init container (`tensorkiln-engine-fetch`), which fetches and
verifies an engine from the registry and lays out Triton's model repository.
`python_backend/model.py`: the Triton Python-backend model of the one engine no native backend
serves, the SimulatedServiceTime SIMULATION that stands in for a GPU on the local cluster.
`client`: finding a model's ready Triton pods, and gRPC inference against them.
"""
