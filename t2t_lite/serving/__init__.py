"""Serving: a trained model exported as a SavedModel that translates raw text."""
