"""Where hosts come from: the local lab (local.py) and EC2 (the ec2 package)."""
