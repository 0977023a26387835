"""TensorKiln's client: `tensorkiln infer` (cli.py, infer.py), one request to a served InferenceModel
through its Service; `triton`: finding a model's Service and ready Triton pods, and gRPC inference against
them; `request`: a file's tensors for a model's inputs, and its outputs described. It depends on the
contract package only, and no image installs it.
"""
