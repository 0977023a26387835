"""Pure status policy: observed objects in, status out (Kubernetes API conventions)."""
