"""Shared storage: the NFS server role, NFS and S3 mounts at the same paths on every host, as
systemd units (their templates beside them)."""
