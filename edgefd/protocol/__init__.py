"""edgefd.protocol"""
