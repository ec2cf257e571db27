"""edgefd.metrics"""
