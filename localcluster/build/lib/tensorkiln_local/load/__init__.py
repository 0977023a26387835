"""Load for the tests and benchmarks that drive served models on the local cluster (no image ships it).

`loadgen`: open-loop load through a model's Service; `capacity`: what one replica sustains;
`evaluation`: latency against an SLO over time; `utilisation`: how busy a pool's replicas were.
"""
