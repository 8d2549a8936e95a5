"""Model families: each folder holds one family's loop and service."""
