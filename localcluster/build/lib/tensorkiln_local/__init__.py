"""The development side of TensorKiln: a real local cluster (upstream control plane built from Go
modules, kwok-simulated GPU pools, the real node local-0: kubelet, containerd, runc), the images and
TensorKiln installed on it with Helm, and the files generated from the code. No image installs it."""
