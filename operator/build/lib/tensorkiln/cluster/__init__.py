"""What the operator knows of the cluster: the watch cache, and the reads and writes through it."""
