from .service import FAMILY, MossNanoService, load

__all__ = ["FAMILY", "MossNanoService", "load"]
