"""Serving compiled engines with NVIDIA Triton Inference Server.

What runs in the Triton pods themselves (the engine fetch, the python backend's model) is the package
tensorkiln_serving.
`client`: finding a model's ready Triton pods, and gRPC inference against them.
"""
