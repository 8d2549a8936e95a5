from .service import FAMILY, VoxCPM2Service, load

__all__ = ["FAMILY", "VoxCPM2Service", "load"]
