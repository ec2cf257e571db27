"""edgefd: federated knowledge distillation for edge devices."""

__version__ = "0.1.0"
