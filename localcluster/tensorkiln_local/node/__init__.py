"""The local node agent: a kubelet that runs the pods bound to local-0 as local processes."""
