"""The local development cluster: upstream Kubernetes built from Go modules, kwok-simulated
GPU pools and the real node local-0 (a kubelet with containerd and runc: nodes.py)."""
