"""cpctl: a control-plane node maintenance agent for kubeadm clusters."""

__version__ = "0.1.0"
