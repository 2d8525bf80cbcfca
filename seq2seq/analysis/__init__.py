"""Torch-free analysis of translations: quality signals, confidence, occlusion, AER, heatmaps.

Reads alignment maps, or teacher-forces through a search backend; imports only `core`.
"""
