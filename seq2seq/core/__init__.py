"""Torch-free foundations: configuration, the backend protocol, alignment maths, input rules.

Imports nothing else of the project but `data`.
"""
