"""The development side of TensorKiln: a real local cluster (upstream control plane built from Go
modules, kwok-simulated GPU pools, the real node local-0 run by the agent in `node`), the operator
run detached on it, and the files generated from the code. Neither image installs it."""
