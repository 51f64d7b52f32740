"""Plumbing of one pyinfra run: a memo per run, facts, templates, systemd units, timings, rolling
replacement and the once-per-run inventory validation. It imports none of the steps."""
