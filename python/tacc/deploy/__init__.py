"""Deploying the mechanisms on hypervisors tacc did not build: `tacc agent`."""
