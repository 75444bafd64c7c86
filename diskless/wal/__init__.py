"""The write pipeline: shared WAL segments, uploads and ordered commits."""
