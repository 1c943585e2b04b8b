"""The gateway's HTTP server and what it says about the process: health, readiness, metrics.
"""
