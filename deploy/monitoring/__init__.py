"""Monitoring: node and GPU exporters on every host, Prometheus and Grafana on the monitoring
host, and the files they read."""
