"""The plan tests' fake hosts: what each fact answers on a fresh or converged host of each OS."""
