from .service import FAMILY, NanoService, load

__all__ = ["FAMILY", "NanoService", "load"]
