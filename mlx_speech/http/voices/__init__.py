"""The saved voices' routes: their listing, schema and endpoints."""
