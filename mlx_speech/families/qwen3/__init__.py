from .service import FAMILY, load

__all__ = ["FAMILY", "load"]
