"""The data contract: every data key, its defaults and checks, ports and paths. No pyinfra here
(an import-linter contract holds it), so the operator's commands and the EC2 spec share it."""
