"""edgefd.runtime"""
