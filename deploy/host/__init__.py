"""A host made ready for Ray: base packages, the OS differences, Docker, the Ray image (and the
head's image mirror), the NVIDIA driver and container toolkit, EFA, and files that hold secrets."""
