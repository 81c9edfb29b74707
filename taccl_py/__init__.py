"""taccl_py: synthesize, verify and time collective-communication algorithms; emit MSCCL XML."""

__version__ = "0.1.0"
