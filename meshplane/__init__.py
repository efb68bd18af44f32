"""meshplane: a multi-cluster control plane for API management and L7 traffic."""

__version__ = "0.1.0"
