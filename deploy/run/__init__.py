"""Plumbing of one pyinfra run: a memo per run, facts, templates, systemd units, timings, rolling
replacement, the once-per-run inventory validation and two of pyinfra's costs per operation paid
once (pyinfra_costs). It imports none of the steps."""
