"""The Ray node: the ray-node container, its token, TLS files, temp folder, GCS store and workload
secrets, the cluster's membership, and a host leaving the cluster."""
