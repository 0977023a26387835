"""SLO-based scaling of the serving targets: what Prometheus says about each target's latency and load."""
