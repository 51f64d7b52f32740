"""Where hosts come from: the local lab (lab/) and EC2 (ec2.py)."""
