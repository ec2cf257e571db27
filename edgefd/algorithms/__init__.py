"""edgefd.algorithms"""
