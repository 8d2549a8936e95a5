"""The book jobs' routes: their request, schema and endpoints over the
serving core's ``BookJobs``."""
