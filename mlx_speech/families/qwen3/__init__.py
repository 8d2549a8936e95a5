from .service import FAMILY, Qwen3Service, load

__all__ = ["FAMILY", "Qwen3Service", "load"]
