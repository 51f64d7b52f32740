"""Where hosts come from: the local lab (local.py) and EC2 (ec2.py)."""
