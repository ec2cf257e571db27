"""edgefd.data"""
