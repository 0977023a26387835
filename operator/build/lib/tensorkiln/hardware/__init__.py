"""Hardware classes: which kinds of accelerator and CPU the cluster's nodes offer."""
