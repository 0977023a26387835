"""What runs beside Triton in a serving pod; it depends on the contract package (tensorkiln_api) only.

`enginefetch`: the Triton pod's init container (`tensorkiln-engine-fetch`), which fetches and verifies an
engine from the registry and lays out Triton's model repository.
`python_backend/model.py`: the Triton Python-backend model of the one engine no native backend serves, the
SimulatedServiceTime SIMULATION that stands in for a GPU on the local cluster (copied, not imported).
"""
