"""Reconcilers: gather observed state, call pure builders and status policies, apply results."""
