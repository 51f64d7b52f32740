"""Where hosts come from: the local lab (the lab package) and EC2 (the ec2 package)."""
