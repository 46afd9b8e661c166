"""Test hosts for one machine: network namespaces on a private bridge (mqctl/hosts/lab.py) and
the kernel-level faults between them (mqctl/hosts/faults.py)."""
