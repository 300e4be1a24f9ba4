"""Shared fixtures. Test helpers live in tests/support/."""
