"""The operator's side of serving compiled engines with NVIDIA Triton Inference Server: `batcher_choice`, the
batcher settings chosen again from the manifest's measurements where the spec fixes some of them.

What runs in the Triton pods themselves (the engine fetch, the python backend's model) is the package
tensorkiln_serving; the client that sends them requests (`tensorkiln infer`) is tensorkiln_client.
"""
