"""The firewall: an nftables table of rayrig's own on every host (the ruleset a template fed by
one values function), loaded at boot, and the extra member addresses."""
