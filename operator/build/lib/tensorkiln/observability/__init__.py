"""What the operator shows about itself: Prometheus metrics, JSON logs with the object's
namespace and name, and the Grafana dashboard built from the scaler's own queries."""
