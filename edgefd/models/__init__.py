"""edgefd.models"""
